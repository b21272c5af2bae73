"""The cross-version probe: the ORIGINAL file runs in the interpreter where it worked (a venv with, say,
transformers 4.51.3), the MIGRATED file in the target one (4.57, 5.x), with one state_dict and the same inputs.

Each side is a subprocess running :mod:`.worker` with this package on ``PYTHONPATH`` (the interpreters need only
torch and transformers). The original side writes its state_dict, config, inputs and outputs to a temporary
folder; the migrated side loads them, runs :mod:`.cross_checks` and writes the results back.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .patch_cross import patch_target, run_patch_probe
from .report import ERROR, SETUP_ERROR, CheckResult

_ROOT = Path(__file__).resolve().parent.parent.parent  # the folder holding the cachemigrate package
DEFAULT_RTOL = DEFAULT_ATOL = 1e-5


@dataclasses.dataclass
class CrossReport:
    """What the cross-version probe found: one result per check, and the two runtimes."""

    results: list[CheckResult]
    original_transformers: str | None = None
    migrated_transformers: str | None = None
    tolerance: str | None = None
    max_abs_diff: float | None = None
    nan_seen: bool = False  # an output held NaN on both sides at the same positions (those checks say so)

    def header(self) -> str:
        largest = "-" if self.max_abs_diff is None else f"{self.max_abs_diff:.3e}"
        if self.nan_seen:
            largest += " (where neither side is NaN; both returned NaN in places: see the set-up errors)"
        return (
            f"original on transformers {self.original_transformers or '?'}, migrated on transformers "
            f"{self.migrated_transformers or '?'}; logits and cached tensors: {self.tolerance or '-'}; largest "
            f"difference seen: {largest}"
        )


def _worker(python: str, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("OMP_NUM_THREADS", "1")
    command = [python, "-m", "cachemigrate.probe.worker", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


def _last_line(process: subprocess.CompletedProcess) -> str:
    lines = [line for line in (process.stderr or process.stdout or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {process.returncode}"


def run_cross_probe(
    original: str | Path,
    migrated: str | Path,
    *,
    original_python: str | None = None,
    migrated_python: str | None = None,
    package: str | None = None,
    seed: int = 0,
    settings: dict | None = None,
    rtol: float = DEFAULT_RTOL,
    atol: float = DEFAULT_ATOL,
    timeout: float = 900.0,
) -> CrossReport:
    """Run ORIGINAL under ``original_python`` and MIGRATED under ``migrated_python`` (default: this interpreter)
    and compare them (see :mod:`.cross_checks`). ``settings``: config values set over the tiny ones (the original's
    config, with them, is what the migrated model is built from)."""
    paths = [Path(p).resolve() for p in (original, migrated)]
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"no such modeling file: {path}")
    pythons = [original_python or sys.executable, migrated_python or sys.executable]
    target = patch_target(paths[0])  # a file of patches of library classes: the library's model runs them
    if target is not None:
        return run_patch_probe(*paths, target, pythons, atol, timeout, CrossReport)
    start = time.perf_counter()
    common = [*(["--package", package] if package else []), "--seed", str(seed)]
    with tempfile.TemporaryDirectory(prefix="cachemigrate-xprobe-") as folder:
        try:
            settings_json = json.dumps(settings or {})
            record = ["record", str(paths[0]), "--dir", folder, *common, "--settings", settings_json]
            recorded = _worker(pythons[0], record, timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return _setup(f"cannot run the original with {pythons[0]}: {exc}", start)
        if recorded.returncode != 0:
            return _setup(f"the original does not run with {pythons[0]}: {_last_line(recorded)}", start)
        meta = json.loads(recorded.stdout.strip().splitlines()[-1])
        tolerance = ["--rtol", repr(rtol), "--atol", repr(atol)]
        try:
            replayed = _worker(pythons[1], ["replay", str(paths[1]), "--dir", folder, *common, *tolerance], timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return CrossReport([CheckResult("setup", ERROR, f"cannot run {pythons[1]}: {exc}")], meta["transformers"])
        result_file = Path(folder) / "result.json"
        if not result_file.is_file():
            detail = f"the migrated side crashed with {pythons[1]}: {_last_line(replayed)}"
            return CrossReport(
                [CheckResult("setup", ERROR, detail, time.perf_counter() - start)], meta["transformers"]
            )
        result = json.loads(result_file.read_text())
    return CrossReport(
        [CheckResult(r["name"], r["status"], r["detail"], r["seconds"]) for r in result["results"]],
        result["original_transformers"],
        result["migrated_transformers"],
        result["tolerance"],
        result["max_abs_diff"],
        result.get("nan_seen", False),
    )


def _setup(detail: str, start: float) -> CrossReport:
    return CrossReport([CheckResult("setup", SETUP_ERROR, detail, time.perf_counter() - start)])
