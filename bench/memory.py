"""Parent memory of a run over many files (issue 19: < 150 MiB for 2,000 files, warm and cold, not growing).

    python bench/memory.py                    # 500 and 2,000 files made from the installed transformers' models/
    python bench/memory.py --counts 500 4000  # other sizes

A scratch tree of N modeling files is made by copying, round robin, the PyTorch modeling files of a models/ folder
that the prefilter answers, plus a few legacy files the engine migrates (gpt2, bart; a copy of each every 200 files),
so that results with both texts come back from the workers as in a real fork. ``cachemigrate migrate --check
--report`` runs over it in a fresh process, cold (an empty result cache) and then warm (the same cache), and the
parent's peak resident memory (``ru_maxrss`` of that process alone, not of its workers) is printed. Memory that grows
with the number of files shows as a larger peak for the larger tree.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bulk import installed_models
from cachemigrate.rules.eras import cache_names
from cachemigrate.source.prefilter import nothing_to_migrate
from cachemigrate.source.walk import Selection, collect

GOAL_MIB = 150
# the parent, in process: run the command line, then say its own peak RSS (KiB on Linux) on the named file
PARENT = """
import resource, sys
from cachemigrate.cli.main import entry
sys.argv = ["cachemigrate", *sys.argv[2:]]
try:
    entry()
except SystemExit:
    pass
with open({out!r}, "w") as out:
    out.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))
"""


def make_tree(models: Path, root: Path, count: int) -> None:
    files = collect([models], Selection(), models)
    names = cache_names("4.52")
    clean = [f for f in files if nothing_to_migrate(f.read_text(encoding="utf-8"), names)]
    legacy = [models / "gpt2" / "modeling_gpt2.py", models / "bart" / "modeling_bart.py"]
    for n in range(count):
        source = legacy[(n // 200) % len(legacy)] if n % 200 == 0 else clean[n % len(clean)]
        folder = root / f"m{n:05d}"
        folder.mkdir(parents=True)
        shutil.copyfile(source, folder / source.name)


def peak_mib(root: Path, cache: Path, report: Path) -> float:
    with tempfile.NamedTemporaryFile(suffix=".rss", delete=False) as handle:
        out = handle.name
    env = {**os.environ, "CACHEMIGRATE_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
    args = ["migrate", "--era", "4.52", "--check", "-q", "-j", "2", "--report", str(report), str(root)]
    subprocess.run([sys.executable, "-c", PARENT.format(out=out), "-", *args], env=env, check=True, capture_output=True)
    kib = int(Path(out).read_text())
    os.unlink(out)
    return kib / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, default=None, help="a transformers models/ folder")
    parser.add_argument("--counts", type=int, nargs="+", default=[500, 2000], help="tree sizes")
    args = parser.parse_args(argv)
    models = args.models or installed_models()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n")
    print("| files | parent peak, cold | parent peak, warm | goal |")
    print("|---|---|---|---|")
    for count in args.counts:
        with tempfile.TemporaryDirectory() as scratch:
            scratch = Path(scratch)
            make_tree(models, scratch / "tree", count)
            cold = peak_mib(scratch / "tree", scratch / "cache", scratch / "cold.json")
            warm = peak_mib(scratch / "tree", scratch / "cache", scratch / "warm.json")
        ok = max(cold, warm) < GOAL_MIB
        print(f"| {count} | {cold:.0f} MiB | {warm:.0f} MiB | < {GOAL_MIB} MiB: {'met' if ok else 'missed'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
