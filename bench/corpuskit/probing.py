"""Probing a migrated corpus file against its original, each pair in its own Python process (models and modules
never leak between files, and a probe that hangs is stopped at its timeout).

A file is imported inside the transformers package it comes from (its relative imports need that), in the
INSTALLED transformers: ``transformers.models.<model>`` or ``transformers.models.deprecated.<model>``. A file of an
older release whose folder has moved since (4.35.2's ``models/gptsan_japanese`` is ``models/deprecated/...`` in
4.51.3) is imported in a package registered under its old name, whose folder is the installed one: the relative
imports keep their depth, and ``.configuration_x`` is the installed configuration.

    python bench/corpuskit/probing.py ORIGINAL MIGRATED PACKAGE   # prints the results as JSON
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

# the checks that decode step by step on a past (the tuple path): one of them must pass for a file to pass
STEPWISE = ("tuple_cache_stepwise", "cross_tuple_stepwise")


@dataclasses.dataclass
class ProbeOutcome:
    checks: dict[str, tuple[str, str]]  # check -> (status, detail)
    error: str | None = None  # the probe could not run (set-up, timeout, crash)

    @property
    def verdict(self) -> str:
        """pass, diverged, setup-error, or error.

        pass: the cached path was compared (a stepwise check, :data:`STEPWISE`, passed), and every other check
        passed or does not apply. A check that does not apply is a skip, or a set-up error: the ORIGINAL itself
        cannot run that check on the tiny model (both files raise the same error), so there is nothing to compare.
        setup-error: no stepwise check compared anything (ESM's original cannot take a cached step, the Q-Formers'
        cannot take a past at all): what the migration changed was never run, whatever else passed."""
        if self.error:
            return "error"
        statuses = {status for status, _ in self.checks.values()}
        if statuses & {"fail", "error"}:
            return "diverged"
        if not any(self.checks.get(name, ("",))[0] == "pass" for name in STEPWISE):
            return "setup-error"
        return "pass"


def probe_pair(original: Path, migrated: Path, package: str, timeout: float) -> ProbeOutcome:
    command = [sys.executable, str(Path(__file__).resolve()), str(original), str(migrated), package]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return ProbeOutcome({}, f"the probe did not finish in {timeout:.0f}s")
    if done.returncode != 0 or not done.stdout.strip():
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return ProbeOutcome({}, f"the probe crashed (exit {done.returncode}): {tail}")
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return ProbeOutcome({r["name"]: (r["status"], r["detail"]) for r in results})


def _package(name: str, relative: str) -> str:
    """``name`` if the installed transformers has it, else a package of that name over the installed folder of
    the same model (moved to or from ``deprecated/``)."""
    try:
        if importlib.util.find_spec(name) is not None:
            return name
    except ModuleNotFoundError:
        pass
    import transformers

    model = name.rsplit(".", 1)[1]
    models = Path(transformers.__file__).parent / "models"
    for folder in (models / model, models / "deprecated" / model):
        if folder.is_dir():
            spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            spec.submodule_search_locations = [str(folder)]
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            parent, _, child = name.rpartition(".")
            if parent in sys.modules:
                setattr(sys.modules[parent], child, module)
            return name
    raise SystemExit(f"{relative}: the installed transformers has no folder for the model {model}")


def _main(argv: list[str]) -> int:
    original, migrated, package = argv
    root = Path(__file__).resolve().parent.parent.parent
    sys.path.insert(0, str(root))  # the checkout's cachemigrate
    importlib.import_module("transformers.models")
    if package.count(".") == 3:
        importlib.import_module("transformers.models.deprecated")
    from cachemigrate.probe import run_probe

    package = _package(package, original)
    results = run_probe(original, migrated, package=package)
    print(json.dumps([{"name": r.name, "status": r.status, "detail": r.detail} for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
