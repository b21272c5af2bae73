"""``cachemigrate migrate`` over a list of files: print diagnostics and diffs, write the results, count, report.

Every file is written whole (:func:`~cachemigrate.writing.write_atomically`), so at any moment each file is fully
old or fully new. SIGINT/SIGTERM stop the run at once (the workers are ended, no file is cut short), with exit
status 130/143.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from pathlib import Path

import click

from . import diagnostics as codes
from .diagnostics import Diagnostic
from .engine import Options
from .render import unified_diff
from .runner import Failure, Result, failed, run
from .signals import Interrupted, StopOnSignal
from .writing import is_read_only, read_only_diagnostic, write_atomically

EXIT_OK, EXIT_CHANGES, EXIT_INTERNAL = 0, 1, 123


@dataclasses.dataclass
class Batch:
    era: str
    tier: str
    rule_dirs: tuple[Path, ...]
    options: Options
    jobs: int = 1
    show_diff: bool = False
    check: bool = False
    report: Path | None = None
    quiet: bool = False


class _Run:
    def __init__(self, batch: Batch, total: int) -> None:
        self.batch, self.total = batch, total
        self.counts = {"migrated": 0, "clean": 0, "failed": 0, "error": 0}
        self.results: list[Result | Failure] = []
        self.would_change = self.written = 0
        self.guard = StopOnSignal()

    @property
    def writes(self) -> bool:
        return not (self.batch.show_diff or self.batch.check)

    def _write(self, result: Result) -> Diagnostic | None:
        """Write one migrated file; a file that cannot be written is a diagnostic."""
        if is_read_only(result.path):
            return read_only_diagnostic(result.path)
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

    def _handle(self, result: Result | Failure) -> None:
        self.results.append(result)
        if isinstance(result, Failure):
            self.counts["error"] += 1
            click.echo(f"error: {result.path}: internal error: {result.error}", err=True)
            return
        if result.changed and self.writes:
            problem = self._write(result)
            if problem:
                result = self.results[-1] = failed(result, problem)
        self.counts[result.status] += 1
        for diagnostic in result.diagnostics:
            click.echo(str(diagnostic))
        if result.changed:
            self.would_change += 1
            if self.batch.show_diff:
                click.echo(unified_diff(result.path, result.original, result.migrated), nl=False)
        if not self.batch.quiet:
            verb = result.status if result.status != "migrated" else "migrated" if self.writes else "would migrate"
            click.echo(f"[{len(self.results)}/{self.total}] {result.path}: {verb} ({result.seconds:.1f}s)", err=True)

    def write_report(self, seconds: float, interrupted: Interrupted | None) -> None:
        batch = self.batch
        payload = {"era": batch.era, "tier": batch.tier, "seconds": round(seconds, 2), "counts": self.counts}
        if interrupted is not None:
            payload["interrupted"] = str(interrupted)
        payload["files"] = [
            r.to_json() if isinstance(r, Result) else {"path": r.path, "status": "error", "error": r.error}
            for r in sorted(self.results, key=lambda r: r.path)
        ]
        write_atomically(batch.report, (json.dumps(payload, indent=2) + "\n").encode("utf-8"))


def migrate_files(files: list[Path], batch: Batch) -> int:
    """Migrate ``files``; returns the exit status: 0, 1 (``--check`` found changes, or a file was not migrated),
    123 (an internal error), 130/143 (SIGINT/SIGTERM)."""
    state = _Run(batch, len(files))
    started = time.perf_counter()
    with state.guard:
        try:
            with contextlib.closing(
                run(files, batch.era, batch.rule_dirs, batch.options, batch.jobs, on_result=state.handle)
            ) as results:
                for _ in results:
                    pass
        except Interrupted as exc:  # the workers are gone and no write was cut short; later signals are ignored
            click.echo(
                f"interrupted by {exc}: stopped after {len(state.results)} of {len(files)} files; "
                f"{state.written} written, every other file unchanged",
                err=True,
            )
            if batch.report:
                state.write_report(time.perf_counter() - started, exc)
            return exc.exit_code
    elapsed = time.perf_counter() - started
    if batch.report:
        state.write_report(elapsed, None)
    counts = state.counts
    if not batch.quiet:
        action = "migrated" if state.writes else "would be migrated"
        click.echo(
            f"{counts['migrated']} {action}, {counts['failed']} left unchanged with diagnostics, "
            f"{counts['clean']} had nothing to migrate, {counts['error']} internal errors ({elapsed:.1f}s)",
            err=True,
        )
    if counts["error"]:
        return EXIT_INTERNAL
    if counts["failed"] or (batch.check and state.would_change):
        return EXIT_CHANGES
    return EXIT_OK
