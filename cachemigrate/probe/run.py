"""Running the probe: load both files, find the classes, run every check and record its outcome."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import random
import time
import warnings
from pathlib import Path

from .checks import CHECK_NAMES, REGISTRY, Check
from .compare import CheckFailed, CheckSkipped, one_line
from .context import Probe
from .loading import load_modeling_module, unload_module
from .models import discover, matching_classes
from .report import ERROR, FAIL, PASS, SKIP, CheckResult


def run_probe(
    original: str | Path,
    migrated: str | Path,
    *,
    checks: list[str] | None = None,
    static: bool | None = None,
    seed: int = 0,
) -> list[CheckResult]:
    """Run the check matrix on ORIGINAL vs MIGRATED; one CheckResult per check in ``checks`` (default: CHECK_NAMES).

    ``static``: None runs static_generate only when the migrated model sets ``_supports_static_cache``, True forces
    it, False skips it. A file that fails to import or whose model classes cannot be found makes every check "error".
    """
    names = _select(checks)
    paths = [Path(p) for p in (original, migrated)]
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"no such modeling file: {path}")
    digest = hashlib.sha1("\0".join(str(p.resolve()) for p in paths).encode()).hexdigest()[:10]
    modules = []
    with _probe_environment():
        try:
            start = time.perf_counter()
            try:
                for role, path in zip(("original", "migrated"), paths):
                    modules.append(load_modeling_module(path, alias=f"_cm_{role}_{digest}"))
                classes = discover(modules[0])
                probe = Probe(classes, matching_classes(classes, modules[1]), static=static, seed=seed)
            except Exception as exc:  # noqa: BLE001
                detail = f"setup failed: {one_line(exc)}"
                return [CheckResult(n, ERROR, detail, time.perf_counter() - start) for n in names]
            return [run_check(probe, REGISTRY[name]) for name in names]
        finally:
            for module in modules:
                unload_module(module)


def run_check(probe: Probe, check: Check) -> CheckResult:
    """Run one check and record its outcome (pass, fail, skip, error)."""
    import torch

    _seed_all(probe.seed)
    start = time.perf_counter()
    reason = check.skip_reason(probe)
    try:
        if reason:
            raise CheckSkipped(reason)
        with torch.enable_grad() if check.grad else torch.no_grad():
            status, detail = PASS, check.run(probe)
    except CheckFailed as exc:
        status, detail = FAIL, str(exc)
    except CheckSkipped as exc:
        status, detail = SKIP, str(exc)
    except Exception as exc:  # noqa: BLE001 - a crashing check is reported, not raised
        status, detail = ERROR, one_line(exc)
    return CheckResult(check.name, status, detail.replace("\n", " "), time.perf_counter() - start)


def _select(checks: list[str] | None) -> list[str]:
    if checks is None:
        return list(CHECK_NAMES)
    unknown = [c for c in checks if c not in REGISTRY]
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(CHECK_NAMES)}")
    return list(checks)


def _seed_all(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    with contextlib.suppress(ImportError):
        import numpy

        numpy.random.seed(seed)


@contextlib.contextmanager
def _probe_environment():
    """For the duration of the probe: one torch thread, no Python warnings, logging below ERROR switched off.

    The models are tiny, so intra-op threads only add synchronisation cost (up to 10x slower on a busy machine).
    """
    import torch
    from transformers.utils import logging as hf_logging

    threads, verbosity, disabled = torch.get_num_threads(), hf_logging.get_verbosity(), logging.root.manager.disable
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    logging.disable(logging.WARNING)  # remote-code files log through loggers outside the transformers tree
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(disabled)
        hf_logging.set_verbosity(verbosity)
        torch.set_num_threads(threads)
