"""Build the test runtimes: one venv per transformers release, each with torch pinned to the local CPU build.

    python bench/runtimes.py                      # /work/venvs/tf450, tf4576, tf525 (skips those that exist)
    python bench/runtimes.py --root ~/.cache/cm   # elsewhere; prints the variables the tests read
    python bench/runtimes.py --only tf4576 tf525  # some of them (what .ci/run builds)

The tests marked ``runtimes`` (tests/test_era_auto_runtimes.py, tests/test_era_cross_probe.py,
tests/test_era_mask_none.py) and bench/era_matrix.py find the interpreters through $CACHEMIGRATE_TF450_PYTHON,
$CACHEMIGRATE_TF4576_PYTHON and $CACHEMIGRATE_TF5_PYTHON (defaults: the folders above) and are skipped where one is
missing. ``.ci/run`` calls this script, so that CI runs them: a venv that already holds its release is kept, a
missing or broken one is (re)built. Only torch and transformers are installed; the probe puts this checkout on
PYTHONPATH. Standard output is only the ``export`` lines (pip's own output goes to standard error), for
``eval``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

TORCH = "torch==2.13.0"  # the CPU build on local disk; any other torch pulls a multi-GB CUDA build
RUNTIMES = {  # folder name -> (transformers release, the variable the tests read)
    "tf450": ("4.50.0", "CACHEMIGRATE_TF450_PYTHON"),
    "tf4576": ("4.57.6", "CACHEMIGRATE_TF4576_PYTHON"),
    "tf525": ("5.25.0", "CACHEMIGRATE_TF5_PYTHON"),  # the newest 5.x; README's era matrix names it
}


def _holds(python: Path, release: str) -> bool:
    """``python`` imports torch and holds transformers ``release`` (by package metadata)."""
    check = f"import importlib.metadata as m, torch; assert m.version('transformers') == '{release}'"
    return python.is_file() and subprocess.run([str(python), "-c", check], capture_output=True).returncode == 0


def build(root: Path, name: str, release: str) -> Path:
    """The interpreter of ``root/name``, a venv with transformers ``release`` (built if it has none)."""
    folder = root / name
    python = folder / "bin" / "python"
    if _holds(python, release):
        return python
    start = time.perf_counter()
    print(f"building {folder} (transformers {release}, {TORCH})", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True, stdout=sys.stderr)
    install = [str(python), "-m", "pip", "install", "-q", TORCH, f"transformers=={release}"]
    subprocess.run(install, check=True, stdout=sys.stderr)
    if not _holds(python, release):
        raise SystemExit(f"error: {folder}: transformers {release} with {TORCH} did not install")
    print(f"built {folder} in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return python


def newest(major: str, listing: str) -> str | None:
    """The newest final release of ``major`` (``"5"``) in the output of ``pip index versions transformers``."""
    line = next((text for text in listing.splitlines() if text.startswith("Available versions:")), "")
    found = [v.strip() for v in line.partition(":")[2].split(",") if re.fullmatch(rf"{major}\.\d+(\.\d+)*", v.strip())]
    return max(found, key=lambda v: tuple(int(part) for part in v.split(".")), default=None)


def warn_if_stale(run=subprocess.run) -> None:
    """Say on standard error when the package index has a newer 5.x than the one pinned here (5.x ships weekly:
    bump ``RUNTIMES`` and rerun the era matrix). Quiet when the index cannot be asked."""
    pinned = RUNTIMES["tf525"][0]
    try:
        done = run([sys.executable, "-m", "pip", "index", "versions", "transformers"], capture_output=True,
                   text=True, timeout=60)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return
    latest = newest(pinned.split(".")[0], done.stdout or "")
    if latest and tuple(map(int, latest.split("."))) > tuple(map(int, pinned.split("."))):
        print(f"note: transformers {latest} is out, newer than the pinned {pinned}: bump RUNTIMES in "
              f"bench/runtimes.py and rerun bench/era_matrix.py", file=sys.stderr)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/work/venvs"))
    parser.add_argument("--only", nargs="*", choices=sorted(RUNTIMES), help="folder names (default: all)")
    args = parser.parse_args(argv)
    root = args.root.expanduser()
    root.mkdir(parents=True, exist_ok=True)
    warn_if_stale()
    for name in args.only or RUNTIMES:
        release, variable = RUNTIMES[name]
        print(f"export {variable}={build(root, name, release)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
