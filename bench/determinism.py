"""The determinism recipe of the node-identity bug, as a script: N copies of one modeling file migrated by the CLI
with ``-j 2``, repeated, in every tier; every run of a tier must give ONE hash for all copies, and the same hash
as every other run.

    python bench/determinism.py [--file PATH] [--copies 50] [--runs 10] [--tiers dynamic static upstream]

The default file is the installed transformers' modeling_gpt2.py. Prints one line per run and a summary; exits 1
if any tier gave more than one output.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _default_file() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("transformers is not installed: pass --file")
    return Path(spec.submodule_search_locations[0]) / "models" / "gpt2" / "modeling_gpt2.py"


def run_once(source: Path, copies: int, tier: str, jobs: int) -> tuple[set[str], float]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "d"
        folder.mkdir()
        (Path(tmp) / "pyproject.toml").write_text("[tool.black]\nline-length = 119\n")
        for number in range(1, copies + 1):
            shutil.copyfile(source, folder / f"modeling_g{number:02d}.py")
        started = time.perf_counter()
        command = [
            sys.executable,
            "-m",
            "cachemigrate.cli.main",
            "migrate",
            "-q",
            "--no-cache",
            "-j",
            str(jobs),
            "--era",
            "4.52",
        ]
        completed = subprocess.run([*command, "--tier", tier, str(folder)], capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if completed.returncode not in (0, 1):
            sys.exit(f"migrate exited {completed.returncode}: {completed.stderr[-2000:]}")
        digests = {hashlib.md5(path.read_bytes()).hexdigest() for path in sorted(folder.glob("*.py"))}
        return digests, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file", type=Path, default=None)
    parser.add_argument("--copies", type=int, default=50)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--tiers", nargs="+", default=["dynamic", "static", "upstream"])
    args = parser.parse_args()
    source = args.file or _default_file()
    bad = 0
    print(f"{source}: {args.copies} copies, {args.runs} runs per tier, -j {args.jobs}")
    for tier in args.tiers:
        seen: set[str] = set()
        for run in range(1, args.runs + 1):
            digests, seconds = run_once(source, args.copies, tier, args.jobs)
            seen |= digests
            print(f"  {tier:<9} run {run:>2}: {len(digests)} distinct output(s) ({seconds:.0f} s)", flush=True)
        verdict = "one output" if len(seen) == 1 else f"{len(seen)} DIFFERENT outputs"
        bad += len(seen) != 1
        print(f"{tier}: {verdict} over {args.runs} runs x {args.copies} copies")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
