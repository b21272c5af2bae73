"""``cachemigrate probe --original-python ... --migrated-python ...`` for a file of patches of library classes
(:mod:`cachemigrate.facts.patches`): the library's own tiny causal LM runs with the ORIGINAL patch in the original
interpreter and with the MIGRATED patch in the migrated one (:mod:`.patches`, one subprocess each), and the checks
``logits`` (the full forward), ``tokens`` (greedy generation) and ``scores`` (each generation step) are reported as
the cross-version probe reports its own."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import libcst as cst

from ..facts.analysis import analyze
from ..facts.patches import probe_target
from ..rules.eras import cache_names
from .report import ERROR, FAIL, PASS, SETUP_ERROR, CheckResult

_ROOT = Path(__file__).resolve().parent.parent.parent
CHECKS = ("logits", "tokens", "scores")


def patch_target(path: Path) -> tuple[str, str | None] | None:
    """(library module, swap function) where the file is a file of patches, else None."""
    module = cst.parse_module(path.read_text(encoding="utf-8"))
    return probe_target(module, analyze(module, cache_names("4.52")))  # the eras after 4.52 inherit its names


def _worker(python: str, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(_ROOT), os.environ.get("PYTHONPATH")]))}
    env.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.run(
        [python, "-m", "cachemigrate.probe.patches", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def _last_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in (done.stderr or done.stdout or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {done.returncode}"


def run_patch_probe(original: Path, migrated: Path, target, pythons: list[str], atol: float, timeout: float, report):
    """The report (``report``: the cross probe's report class) of the library model run with each patch."""
    library, swap = target
    apply = ["--apply", swap] if swap else []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cachemigrate-patchprobe-") as folder:
        recorded = _worker(pythons[0], ["record", library, folder, str(original), *apply], timeout)
        if recorded.returncode != 0:
            detail = f"the original patch does not run with {pythons[0]}: {_last_line(recorded)}"
            return report([CheckResult("setup", SETUP_ERROR, detail, time.perf_counter() - start)])
        meta = json.loads(recorded.stdout.strip().splitlines()[-1])
        replay = ["replay", library, folder, str(migrated), "--atol", repr(atol), *apply]
        replayed = _worker(pythons[1], replay, timeout)
        seconds = time.perf_counter() - start
        if replayed.returncode != 0:
            detail = f"the migrated side crashed with {pythons[1]}: {_last_line(replayed)}"
            return report([CheckResult("setup", ERROR, detail, seconds)], meta["transformers"])
    [result] = json.loads(replayed.stdout.strip().splitlines()[-1])
    if "checks" not in result:  # the migrated patch raised: every check is that error
        results = [CheckResult(name, ERROR, result["detail"], seconds) for name in CHECKS]
    else:
        results = [
            CheckResult(
                name, FAIL if why else PASS, why or f"largest difference {result[f'{name}_max_abs_diff']:.3e}", seconds
            )
            for name, why in result["checks"].items()
        ]
    largest = max(
        (result[f"{name}_max_abs_diff"] for name in ("logits", "scores") if f"{name}_max_abs_diff" in result),
        default=None,
    )
    tolerance = f"atol {atol} (tokens exact); the library model patched: {', '.join(result['patched']) or 'nothing'}"
    return report(results, meta["transformers"], result["transformers"], tolerance, largest)
