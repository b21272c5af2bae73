"""Build the test runtimes: one venv per transformers release, each with torch pinned to the local CPU build.

    python bench/runtimes.py                      # /work/venvs/tf450, tf4576, tf524 (skips those that exist)
    python bench/runtimes.py --root ~/.cache/cm   # elsewhere; prints the variables the tests read

The tests marked ``runtimes`` (tests/test_era_auto_runtimes.py, tests/test_era_cross_probe.py) and
bench/era_matrix.py find the interpreters through $CACHEMIGRATE_TF450_PYTHON, $CACHEMIGRATE_TF4576_PYTHON and
$CACHEMIGRATE_TF5_PYTHON (defaults: the folders above) and are skipped where one is missing, as on a fresh CI
machine: building the three venvs takes minutes and the package index. Only torch and transformers are installed;
the probe puts this checkout on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

TORCH = "torch==2.13.0"  # the CPU build on local disk; any other torch pulls a multi-GB CUDA build
RUNTIMES = {  # folder name -> (transformers release, the variable the tests read)
    "tf450": ("4.50.0", "CACHEMIGRATE_TF450_PYTHON"),
    "tf4576": ("4.57.6", "CACHEMIGRATE_TF4576_PYTHON"),
    "tf524": ("5.24.0", "CACHEMIGRATE_TF5_PYTHON"),
}


def build(root: Path, name: str, release: str) -> Path:
    """The interpreter of ``root/name``, a venv with transformers ``release`` (built if it has none)."""
    folder = root / name
    python = folder / "bin" / "python"
    check = [str(python), "-c", f"import importlib.metadata as m; assert m.version('transformers') == '{release}'"]
    if python.is_file() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", TORCH, f"transformers=={release}"], check=True)
    return python


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/work/venvs"))
    parser.add_argument("--only", nargs="*", choices=sorted(RUNTIMES), help="folder names (default: all)")
    args = parser.parse_args(argv)
    for name in args.only or RUNTIMES:
        release, variable = RUNTIMES[name]
        print(f"export {variable}={build(args.root.expanduser(), name, release)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
