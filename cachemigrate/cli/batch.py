"""``cachemigrate migrate`` over a list of files: print diagnostics and diffs, write the results, count, report.

Every file is written whole (:func:`~cachemigrate.source.writing.write_atomically`), so at any moment each file is fully
old or fully new. SIGINT/SIGTERM stop the run at once (the workers are ended, no file is cut short), with exit
status 130/143. What is shown, and where, is :mod:`cachemigrate.cli.progress`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections import Counter
from pathlib import Path

from .. import diagnostics as codes
from ..diagnostics import Diagnostic
from ..edit.render import unified_diff
from ..edit.width import width_note
from ..proof.companions import companion_notes
from ..proof.forced_config import forced_config_notes
from ..proof.generate_inputs import in_place_input_notes
from ..results import Options
from ..rules.checked import CheckedRules
from ..rules.eras import cache_names, config_defaults, forced_config, removed_imports
from ..source.units import package_units
from ..source.writing import is_read_only, read_only_diagnostic, write_atomically
from .package import migrate_unit, write_unit
from .progress import Reporter
from .result_cache import ResultCache
from .runner import Failure, Result, changed_meanwhile, changed_since_read, failed, run
from .signals import Interrupted, StopOnSignal

EXIT_OK, EXIT_CHANGES, EXIT_INTERNAL = 0, 1, 123


@dataclasses.dataclass
class Batch:
    """What one ``migrate`` run was asked: the era, tier, rules, engine options, jobs, output and cache folders."""

    era: str
    tier: str
    rule_dirs: tuple[Path, ...]
    options: Options
    jobs: int = 1
    show_diff: bool = False
    check: bool = False
    report: Path | None = None
    quiet: bool = False
    verbose: bool = False
    color: bool = False
    cache_dir: Path | None = None  # None: no cache
    checked_dir: Path | None = None  # where the record of the rule sets that loaded is kept (--no-cache or not)

    @property
    def writes(self) -> bool:
        return not (self.show_diff or self.check)

    def open_cache(self) -> ResultCache | None:
        return ResultCache.open(self.cache_dir, self.era, self.rule_dirs, self.options)

    def checked_rules(self) -> CheckedRules:
        return CheckedRules(self.checked_dir)


def with_config_notes(result: Result, era: str) -> Result:
    """A migrated file with its notes about its config (read beside the file now: never cached): CM911 for each
    config attribute it reads that the era's runtime no longer sets by default and its config class does not set,
    CM912 where the module it takes its config from imports what that runtime removed; CM914 where a forward updates
    in place an input that runtime's generate() keeps between steps (proof/generate_inputs.py); CM915 where it reads a
    config attribute that transformers' own config class sets whatever it is given there (proof/forced_config.py)."""
    if result.status != "migrated":
        return result
    defaults, runtime = config_defaults(era)
    if not defaults:  # an era whose runtime keeps 4.x's config (and its imports)
        return result
    notes = companion_notes(result.path, result.migrated, era, defaults, runtime, removed_imports(era))
    notes += in_place_input_notes(result.path, result.migrated, runtime)
    forced, forced_runtime = forced_config(era)
    notes += forced_config_notes(result.path, result.migrated, era, forced, forced_runtime)
    return dataclasses.replace(result, diagnostics=sorted([*result.diagnostics, *notes])) if notes else result


def verb_of(result: Result, writes: bool) -> str:
    if result.status == "migrated":
        return "migrated" if writes else "would migrate"
    return result.status


class _Run:
    def __init__(self, batch: Batch, total: int) -> None:
        self.batch, self.total = batch, total
        self.counts = {"migrated": 0, "clean": 0, "skipped": 0, "failed": 0, "error": 0}
        self.answered: Counter = Counter()
        # what the report needs of each file (no texts): the parent's memory stays flat however many files run
        self.entries: list[dict] = []
        self.seen = 0
        self.would_change = self.written = 0
        self.guard = StopOnSignal()
        self.show = Reporter(total, batch.verbose, batch.quiet, batch.color)

    def _write(self, result: Result) -> Diagnostic | None:
        """Write one migrated file; a file that cannot be written is a diagnostic."""
        if is_read_only(result.path):
            return read_only_diagnostic(result.path)
        if changed_since_read(result):
            return changed_meanwhile(result.path)
        try:
            write_atomically(result.path, result.encoded())
            self.written += 1
        except OSError as exc:
            why = f"cannot write the file: {exc.strerror or exc}; it was left unchanged"
            return Diagnostic(result.path, 1, 1, codes.UNWRITABLE, why)
        return None

    def handle(self, result: Result | Failure) -> None:
        """Account for, print and write one result; a signal meanwhile waits until all three are done."""
        with self.guard.critical():
            self._handle(result)

    def handle_unit(self, results: list[Result]) -> None:
        """A package unit's results (:mod:`cachemigrate.cli.package`): written all or none, then accounted for."""
        with self.guard.critical():
            results = [with_config_notes(result, self.batch.era) for result in results]
            if self.batch.writes:
                results, written = write_unit(results)
                self.written += written
            for result in results:
                self._handle(result, write=False)

    def _handle(self, result: Result | Failure, write: bool = True) -> None:
        self.seen += 1
        if isinstance(result, Failure):
            self._keep(result)
            self.counts["error"] += 1
            self.show.err(f"error: {result.path}: internal error: {result.error}")
            self.show.file(result.path, "error", "internal error", 0.0, "engine")
            return
        result = with_config_notes(result, self.batch.era) if write else result
        if write and result.changed and self.batch.writes:
            problem = self._write(result)
            if problem:
                result = failed(result, problem)
        self._keep(result)
        self.counts[result.status] += 1
        self.answered[result.how] += 1
        for diagnostic in result.diagnostics:
            self.show.diagnostic(str(diagnostic))
        if result.changed:
            self.would_change += 1
            if self.batch.show_diff:
                self.show.diff(unified_diff(result.path, result.original, result.migrated))
        self.show.file(result.path, result.status, verb_of(result, self.batch.writes), result.seconds, result.how)
        if result.changed and self.batch.verbose and not self.batch.quiet:
            self.show.err(
                f"  inserted code of {result.path}: {width_note(self.batch.options.line_length, result.original)}"
            )

    def _keep(self, result: Result | Failure) -> None:
        """The file's report entry, when there is a report; the texts are dropped with the result."""
        if self.batch.report is None:
            return
        if isinstance(result, Result):
            self.entries.append(result.to_json())
        else:
            self.entries.append({"path": result.path, "status": "error", "error": result.error})

    def write_report(self, seconds: float, interrupted: Interrupted | None) -> bool:
        """Write the JSON report; False (and an error said) when it cannot be written (a full disk...)."""
        try:
            self._write_report(seconds, interrupted)
        except OSError as exc:
            self.show.err(
                f"error: --report {self.batch.report}: cannot write the report: {exc.strerror or exc} "
                f"({self.written} migrated files were written all the same)"
            )
            return False
        return True

    def _write_report(self, seconds: float, interrupted: Interrupted | None) -> None:
        batch = self.batch
        payload = {"era": batch.era, "tier": batch.tier, "seconds": round(seconds, 2), "counts": self.counts}
        if interrupted is not None:
            payload["interrupted"] = str(interrupted)
        payload["files"] = sorted(self.entries, key=lambda entry: entry["path"])
        write_atomically(batch.report, (json.dumps(payload, indent=2) + "\n").encode("utf-8"))


def migrate_files(files: list[Path], batch: Batch) -> int:
    """Migrate ``files``; returns the exit status: 0, 1 (``--check`` found changes, a file was not migrated, or the
    report could not be written),
    123 (an internal error), 130/143 (SIGINT/SIGTERM). A bad rule file raises RuleError before anything is
    written."""
    units, alone = package_units(files, cache_names(batch.era))
    state = _Run(batch, len(alone) + sum(len(unit) for unit in units))
    started = time.perf_counter()
    with state.guard:
        try:
            if units:  # the modules of a package, migrated together (in this process)
                from ..rules.loader import load_ruleset

                ruleset = load_ruleset(batch.era, batch.rule_dirs)
                named = {path.resolve() for path in files}
                for unit in units:
                    state.handle_unit(migrate_unit(unit, named, ruleset, batch.options))
            files = alone
            cache, checked = batch.open_cache(), batch.checked_rules()
            results = run(files, batch.era, batch.rule_dirs, batch.options, batch.jobs, state.handle, cache, checked)
            with contextlib.closing(results):
                for _ in results:
                    pass
        except Interrupted as exc:  # the workers are gone and no write was cut short; later signals are ignored
            state.show.close()
            state.show.err(
                f"interrupted by {exc}: stopped after {state.seen} of {state.total} files; "
                f"{state.written} written, every other file unchanged"
            )
            if batch.report:
                state.write_report(time.perf_counter() - started, exc)
            return exc.exit_code
        finally:
            state.show.close()
    elapsed = time.perf_counter() - started
    reported = state.write_report(elapsed, None) if batch.report else True
    counts = state.counts
    state.show.summary(counts, batch.writes, elapsed, batch.jobs, dict(state.answered))
    if counts["error"]:
        return EXIT_INTERNAL
    if not reported or counts["failed"] or (batch.check and state.would_change):
        return EXIT_CHANGES
    return EXIT_OK
