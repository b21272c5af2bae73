"""Running the probe: set-up (loading, discovery, the first tiny pair), then every check, each classified.

Set-up problems of the ORIGINAL (it does not import, has no model classes the probe can drive, or its tiny model
cannot run a forward pass) make one "setup-error" result named ``setup``: the probe cannot say anything about the
migration. Set-up problems of the MIGRATED file are divergences: every check errors.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import random
import time
import warnings
from pathlib import Path

from .checks import CHECK_NAMES, REGISTRY, Check
from .compare import CheckFailed, CheckInconclusive, CheckSkipped, one_line
from .context import Probe
from .loading import ProbeSetupError, load_modeling_module, packages_for, unload_module
from .models import build_original, discover, matching_classes
from .seq2seq import cross_targets, encoder_states
from .report import ERROR, FAIL, PASS, SETUP_ERROR, SKIP, CheckResult
from .tiny import tiny_config, vocab_of


def run_probe(
    original: str | Path,
    migrated: str | Path,
    *,
    checks: list[str] | None = None,
    static: bool | None = None,
    seed: int = 0,
    package: str | None = None,
    settings: dict | None = None,
) -> list[CheckResult]:
    """Run the check matrix on ORIGINAL vs MIGRATED; one CheckResult per check in ``checks`` (default: CHECK_NAMES).

    ``static``: None runs the static checks only when the migrated model sets ``_supports_static_cache``, True
    forces them, False skips them. ``package`` (e.g. ``transformers.models.gpt2``) is where files with relative
    imports are imported; by default it is guessed from whichever file is named ``modeling_<name>.py``. ``settings``
    are config values set over the tiny ones (``{"multi_query": False}``), to probe a variant of the model.

    When the probe cannot be set up on the original, the result is a single ``setup`` CheckResult with status
    "setup-error". A migrated file that fails to import makes every check "error".
    """
    names = _select(checks)
    paths = [Path(p) for p in (original, migrated)]
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"no such modeling file: {path}")
    start = time.perf_counter()
    try:
        packages = packages_for(paths, package)
    except ProbeSetupError as exc:
        return [CheckResult("setup", SETUP_ERROR, str(exc), time.perf_counter() - start)]
    digest = hashlib.sha1("\0".join(str(p.resolve()) for p in paths).encode()).hexdigest()[:10]
    modules = []
    with _probe_environment():
        try:
            try:
                probe = _set_up(paths, packages, digest, modules, static, seed, settings or {})
            except ProbeSetupError as exc:
                return [CheckResult("setup", SETUP_ERROR, str(exc), time.perf_counter() - start)]
            except _MigratedBroken as exc:
                detail = f"setup failed: {exc} (the migrated file: every check diverges)"
                return [CheckResult(n, ERROR, detail, time.perf_counter() - start) for n in names]
            return [run_check(probe, REGISTRY[name]) for name in names]
        finally:
            for module in modules:
                unload_module(module)


class _MigratedBroken(Exception):
    """The migrated file cannot be imported or its model built: every check diverges."""


def _set_up(paths: list[Path], packages: list, digest: str, modules: list, static, seed: int, settings: dict) -> Probe:
    """Load both files into ``modules``, find the classes and build the first pair, or say which side failed."""
    original_path, migrated_path = paths
    try:
        modules.append(load_modeling_module(original_path, package=packages[0], alias=f"_cm_original_{digest}"))
    except Exception as exc:  # noqa: BLE001
        raise ProbeSetupError(f"cannot import the original {original_path.name}: {one_line(exc)}") from exc
    try:
        classes = discover(modules[0])
        _smoke(classes, seed, settings)
    except Exception as exc:  # noqa: BLE001
        raise ProbeSetupError(
            f"cannot run the original {original_path.name} on a tiny model: {one_line(exc)}"
        ) from exc
    try:
        modules.append(load_modeling_module(migrated_path, package=packages[1], alias=f"_cm_migrated_{digest}"))
        probe = Probe(classes, matching_classes(classes, modules[1]), static=static, seed=seed, settings=settings)
        probe.pair()  # the original side built above, so what fails here is the migrated side
    except Exception as exc:  # noqa: BLE001
        raise _MigratedBroken(one_line(exc)) from exc
    return probe


def _smoke(classes, seed: int, settings: dict | None = None) -> None:
    """One forward pass without a cache: a tiny config that does not fit the model fails here, once. An
    encoder-decoder model without a decoder-only class runs its decoder on shared encoder states."""
    import torch

    if classes.decoder_only:
        model = build_original(classes, tiny_config(classes.config_class, settings=settings), seed)
        call = {}
    else:
        target = cross_targets(classes, classes)[0]
        model = build_original(target.orig, target.config(), seed)
        call = target.inputs(None, encoder_states(seed, 1, target.width(model)))
    vocab = vocab_of(model.config)
    tokens = torch.randint(1, max(2, vocab - 1), (1, 3))
    with torch.no_grad():
        if call:
            model(**{**call, "decoder_input_ids": tokens}, use_cache=False)
        else:
            model(input_ids=tokens, use_cache=False)


def run_check(probe: Probe, check: Check) -> CheckResult:
    """Run one check and classify its outcome (pass, fail, skip, error, setup-error)."""
    start = time.perf_counter()
    status, detail, exc = _attempt(probe, check)
    if status == ERROR:
        status, detail = _classify_error(probe, check, exc)
    return CheckResult(check.name, status, detail.replace("\n", " "), time.perf_counter() - start)


def _attempt(probe: Probe, check: Check, *, conditions: bool = True):
    """(status, detail, exception) of one run of ``check`` on ``probe``; ``conditions=False`` runs it even where its
    ``requires`` say skip (a control run: they held for the pair under test, and may name the migrated side)."""
    import torch

    _seed_all(probe.seed)
    reason = check.skip_reason(probe) if conditions else None
    if reason:
        return SKIP, reason, None
    try:
        with torch.enable_grad() if check.grad else torch.no_grad():
            return PASS, check.run(probe), None
    except CheckFailed as exc:
        return FAIL, str(exc), None
    except CheckSkipped as exc:
        return SKIP, str(exc), None
    except CheckInconclusive as exc:
        return SETUP_ERROR, str(exc), None
    except Exception as exc:  # noqa: BLE001 - a crashing check is reported, not raised
        return ERROR, one_line(exc), exc


def _classify_error(probe: Probe, check: Check, exc: Exception) -> tuple[str, str]:
    """An exception is a divergence only if the original alone runs the check."""
    message = one_line(exc)
    status, _, alone = _attempt(probe.control("original"), check, conditions=False)
    if status != ERROR:
        return ERROR, f"{message} (the original alone runs this check: a divergence)"
    _, _, migrated_alone = _attempt(probe.control("migrated"), check, conditions=False)
    if migrated_alone is not None and one_line(migrated_alone) == one_line(alone):
        return SETUP_ERROR, f"both files raise {one_line(alone)}: the check cannot run on this model, not a divergence"
    return SETUP_ERROR, f"the original alone raises {one_line(alone)}: the check cannot run on it, not a divergence"


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
