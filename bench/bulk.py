"""Bulk speed: a whole transformers tree, one clean file and one legacy file, measured in one run.

    python bench/bulk.py                      # the installed transformers' models/ (4.51.3 in the test extra)
    python bench/bulk.py --models DIR         # another models/ folder
    python bench/bulk.py --skip-trees         # only (d) and (e): a minute instead of many

What it measures, on every PyTorch ``modeling_*.py`` that ``cachemigrate migrate DIR`` takes (the same walk):

(a) the floor: ``libcst.parse_module(text).code`` of every file, in this process (CPU seconds);
(b) ``cachemigrate migrate --check`` cold (an empty result cache), with ``-j 1`` and ``-j 2`` (CPU seconds of the
    process and its workers, and wall seconds);
(c) the same run again, warm (the cache of (b));
(d) one clean file and one legacy file as the pre-commit check hook runs them (``migrate --check --diff
    --force-exclude FILE``, a fresh process): with an empty cache (the first run ever: the rules are loaded and
    checked once), with the rules already checked but the file new (a commit that touched it), and warm;
(e) migrating gpt2 in this process against its own round trip (CPU seconds).

Prints a markdown table with the goals of issue 11 and whether each is met. Every command runs as a child
process with ``CACHEMIGRATE_CACHE_DIR`` in a temporary folder: nothing outside it is written. CPU seconds are
what the machine's load cannot inflate much; wall seconds on a shared machine can, so the load average is printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from cachemigrate.source.walk import Selection, collect  # noqa: E402

GOALS = {
    "b1": 0.5,  # (b) -j 1 CPU <= 0.5 x (a)
    "b2": 1.7,  # -j 2 at least 1.7 x faster (wall) than -j 1
    "c": 2.0,  # warm re-run under 2 s
    "d": 0.3,  # clean file under 0.3 s
    "e": 3.0,  # gpt2 within 3 x its round trip
}


def installed_models() -> Path:
    spec = importlib.util.find_spec("transformers")  # located, not imported
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("transformers is not installed: name a models/ folder with --models")
    return Path(list(spec.submodule_search_locations)[0]) / "models"


def child(args: list[str], cache: Path) -> tuple[float, float, int]:
    """Run ``cachemigrate`` in a fresh process: (wall seconds, CPU seconds of it and its children, exit code)."""
    env = {**os.environ, "CACHEMIGRATE_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "cachemigrate.cli.main", *args], env=env, capture_output=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1):
        sys.stderr.write(done.stderr.decode(errors="replace"))
        raise SystemExit(f"cachemigrate {' '.join(args)}: exit {done.returncode}")
    return wall, cpu, done.returncode


def round_trip(files: list[Path]) -> float:
    import libcst

    started = time.process_time()
    for path in files:
        libcst.parse_module(path.read_text(encoding="utf-8")).code
    return time.process_time() - started


def gpt2_ratio(models: Path, repeats: int = 2) -> tuple[float, float]:
    """Best of ``repeats``: (round trip, migration) CPU seconds of gpt2, in this process."""
    import libcst

    from cachemigrate.engine import Options, migrate_source
    from cachemigrate.rules.loader import load_ruleset

    code = (models / "gpt2" / "modeling_gpt2.py").read_text(encoding="utf-8")
    ruleset, options = load_ruleset("4.52"), Options(line_length=119)
    trips, migrations = [], []
    for _ in range(repeats):
        started = time.process_time()
        libcst.parse_module(code).code
        trips.append(time.process_time() - started)
        started = time.process_time()
        result = migrate_source(code, ruleset, options, path="modeling_gpt2.py")
        migrations.append(time.process_time() - started)
        assert result.status == "migrated", result.diagnostics
    return min(trips), min(migrations)


def best(runs: list[tuple[float, float, int]]) -> tuple[float, float]:
    return min(r[0] for r in runs), min(r[1] for r in runs)


def verdict(ok: bool, by: str) -> str:
    return "met" if ok else f"missed ({by})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, default=None, help="a transformers models/ folder")
    parser.add_argument("--skip-trees", action="store_true", help="skip (a), (b) and (c)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each single-file measurement (best kept)")
    args = parser.parse_args(argv)
    models = args.models or installed_models()
    files = collect([models], Selection(), models)
    clean, legacy = models / "vit" / "modeling_vit.py", models / "gpt2" / "modeling_gpt2.py"
    check = ["migrate", "--era", "4.52", "--check", "-q"]
    hook = ["migrate", "--era", "4.52", "--check", "--diff", "--force-exclude"]
    rows: list[tuple[str, str, str]] = []
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        if not args.skip_trees:
            floor = round_trip(files)
            rows.append(
                (f"(a) parse_module(...).code of {len(files)} files, 1 process", f"{floor:.1f} CPU-s", "1.00x")
            )
            j1 = child([*check, "-j", "1", str(models)], scratch / "j1")
            j2 = child([*check, "-j", "2", str(models)], scratch / "j2")
            warm = child([*check, "-j", "1", str(models)], scratch / "j1")
            ratio, speedup = j1[1] / floor, j1[0] / j2[0]
            over = f"{ratio / GOALS['b1']:.1f}x over"
            rows += [
                ("(b) migrate --check -j 1, cold", f"{j1[1]:.1f} CPU-s, {j1[0]:.1f} s wall",
                 f"{ratio:.2f}x (a): goal <= {GOALS['b1']}x, {verdict(ratio <= GOALS['b1'], over)}"),
                ("(b) migrate --check -j 2, cold", f"{j2[1]:.1f} CPU-s, {j2[0]:.1f} s wall",
                 f"{speedup:.2f}x faster than -j 1: goal >= {GOALS['b2']}x, "
                 f"{verdict(speedup >= GOALS['b2'], f'{speedup:.2f}x')}"),
                ("(c) migrate --check -j 1, warm", f"{warm[1]:.2f} CPU-s, {warm[0]:.2f} s wall",
                 f"goal < {GOALS['c']} s: {verdict(warm[0] < GOALS['c'], f'{warm[0]:.1f} s')}"),
            ]  # fmt: skip
        first = [child([*hook, str(clean)], scratch / f"first{n}") for n in range(args.repeats)]
        warmed = scratch / "rules-checked"
        child([*hook, str(models / "bert" / "modeling_bert.py")], warmed)  # checks the rules; vit is not cached
        new = []
        for _ in range(args.repeats):
            new.append(child([*hook, str(clean)], warmed))
            for entry in warmed.rglob("*.json"):
                entry.unlink()  # the file is new again
        hot = [child([*hook, str(clean)], warmed) for _ in range(args.repeats)]
        cold_legacy = [child([*hook, str(legacy)], scratch / f"legacy{n}") for n in range(max(1, args.repeats - 1))]
        for label, runs in [
            ("(d) clean file (vit), empty cache: the rules are loaded once", first),
            ("(d) clean file (vit), rules already checked, file new", new),
            ("(d) clean file (vit), warm", hot),
            ("(d) legacy file (gpt2), empty cache", cold_legacy),
        ]:
            wall, cpu = best(runs)
            goal = ""
            if "clean" in label:
                goal = f"goal < {GOALS['d']} s: {verdict(wall < GOALS['d'], f'{wall:.2f} s')}"
            rows.append((label, f"{wall:.2f} s wall, {cpu:.2f} CPU-s", goal))
    trip, migration = gpt2_ratio(models)
    ratio = migration / trip
    over = f"{ratio / GOALS['e']:.1f}x over"
    rows.append(("(e) gpt2: migrate_source vs its own round trip", f"{migration:.2f} vs {trip:.2f} CPU-s",
                 f"{ratio:.1f}x: goal <= {GOALS['e']}x, {verdict(ratio <= GOALS['e'], over)}"))  # fmt: skip
    print(f"{models} ({len(files)} files), load average {load:.1f} on {os.cpu_count()} CPUs\n")
    print("| measurement | time | ratio, goal |")
    print("|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
