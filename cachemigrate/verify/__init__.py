"""``cachemigrate verify``: migrate a fork, run its own tests before and after, and undo a migration that breaks them.

1. Every file is migrated in memory (the engine path of ``migrate``); nothing is written yet.
2. The original bytes of the files that will change are kept in memory and in a backup folder under a temp dir.
3. The fork's tests run on the original code (the baseline), with ``--junitxml`` so that pytest itself reports
   every test's outcome.
4. The migrated files are written atomically, the same tests run again (and the equivalence probe with ``probe``).
5. The runs are compared test by test. A test that passed and now fails or errors is a regression; a test that
   failed before is pre-existing and not blamed. A regression, a second run that cannot run or times out, or a
   failing probe check restores the original bytes (unless ``keep``). Ctrl-C and SIGTERM always restore them.

torch is imported only by the probe, and only when ``probe`` is asked for.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import signal
import tempfile
import time
from pathlib import Path

import click

from ..engine import FileResult, Options
from ..cli.runner import Failure, failed, run
from ..cli.signals import Interrupted, StopOnSignal
from ..source.writing import is_read_only, read_only_diagnostic, write_atomically
from .backup import Backup, _install_handlers
from .report import _plain, _summary, format_regressions
from .suite import (
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_USAGE,
    Outcome,
    Regression,
    SuiteRun,
    build_test_command,
    compare,
    find_root,
    parse_junit,
    run_tests,
)

__all__ = ["VerifyOptions", "verify", "compare", "parse_junit", "Outcome", "Regression", "SuiteRun"]


@dataclasses.dataclass
class VerifyOptions:
    era: str
    tier: str
    rule_dirs: tuple[Path, ...]
    engine: Options
    jobs: int = 1
    tests: str | None = None  # the test command; None runs ``python -m pytest tests`` in the fork root
    probe: bool = False
    keep: bool = False
    timeout: float = 600.0
    report: Path | None = None
    quiet: bool = False


# ----------------------------------------------------------------------------------------------------------------
# The probe
# ----------------------------------------------------------------------------------------------------------------


def run_probes(paths: list[Path], backup: Backup, workdir: Path) -> dict[str, list]:
    """``run_probe(original copy, migrated)`` for each migrated ``modeling_*.py``. The original goes to a temp folder
    named like its own, with the original bytes of its sibling modules, so that relative imports still resolve."""
    from ..probe import run_probe

    results = {}
    for index, path in enumerate(p for p in paths if p.name.startswith("modeling_")):
        folder = workdir / "original" / str(index) / path.parent.name
        folder.mkdir(parents=True)
        for sibling in path.parent.glob("*.py"):
            (folder / sibling.name).write_bytes(backup.originals.get(sibling) or sibling.read_bytes())
        results[str(path)] = run_probe(folder / path.name, path)
    return results


# ----------------------------------------------------------------------------------------------------------------
# The command
# ----------------------------------------------------------------------------------------------------------------


def _migrate_in_memory(files: list[Path], opts: VerifyOptions, report: dict) -> tuple[dict[Path, bytes], int]:
    """Run the engine on ``files`` without writing; print diagnostics. Returns {path: migrated bytes} for the files
    that change, and the exit status the migration alone deserves (as ``migrate`` would give it). A read-only
    file that would change is not migrated (CM905)."""
    results = list(run(files, opts.era, opts.rule_dirs, opts.engine, opts.jobs))
    results = [
        failed(r, read_only_diagnostic(r.path)) if isinstance(r, FileResult) and r.changed and is_read_only(r.path)
        else r
        for r in results
    ]  # fmt: skip
    results.sort(key=lambda r: r.path)
    report["files"] = [
        r.to_json() if isinstance(r, FileResult) else {"path": r.path, "status": "error", "error": r.error}
        for r in results
    ]
    code = EXIT_OK
    for r in results:
        if isinstance(r, Failure):
            click.echo(f"error: {r.path}: internal error: {r.error}", err=True)
            code = EXIT_INTERNAL
        elif r.status == "failed":
            for diagnostic in r.diagnostics:
                click.echo(str(diagnostic))
            code = code or EXIT_REGRESSION
    return {Path(r.path): r.encoded() for r in results if isinstance(r, FileResult) and r.changed}, code


def verify(files: list[Path], opts: VerifyOptions) -> int:
    """Migrate ``files`` with the fork's tests as the judge; returns the exit status:
    0 verified (or nothing to migrate), 1 a regression / timeout / probe failure (or files left unchanged with
    diagnostics), 2 the tests cannot run on the original code, 123 an internal error, 128+N killed by signal N."""
    say = (lambda text: None) if opts.quiet else (lambda text: click.echo(text, err=True))
    started = time.perf_counter()
    report: dict = {"era": opts.era, "tier": opts.tier, "verdict": "nothing-to-migrate", "restored": False}
    try:
        with StopOnSignal():  # Ctrl-C while migrating in memory: the workers are ended, nothing was written
            migrated, code = _migrate_in_memory(files, opts, report)
    except Interrupted as exc:
        click.echo(f"interrupted by {exc} while migrating: nothing was written", err=True)
        return exc.exit_code
    root = find_root(list(migrated)) if migrated else None
    if not migrated:
        say("nothing to migrate: no tests were run")
    elif root is None and opts.tests is None:
        click.echo("error: no folder above the files holds tests/ or pyproject.toml; pass --tests", err=True)
        migrated, code, report["verdict"] = {}, EXIT_USAGE, "no-tests"
    if not migrated:
        _write_report(opts.report, report, started)
        return code
    root = root or Path.cwd()
    try:
        argv, is_pytest = build_test_command(opts.tests, root)
    except ValueError as exc:  # an empty command, unbalanced quotes
        click.echo(f"error: --tests: {exc}", err=True)
        return EXIT_USAGE
    report.update(root=str(root), command=shlex.join(argv))
    workdir = Path(tempfile.mkdtemp(prefix="cachemigrate-verify-"))
    backup = Backup(list(migrated), workdir / "backup")
    previous = _install_handlers()
    restore, message, to_stderr = True, "", True  # any exit but a verified run (or --keep) restores
    try:
        say(f"running the tests on the original code: {shlex.join(argv)} (in {root})")
        baseline = run_tests(argv, is_pytest, root, opts.timeout, workdir, "baseline")
        if not baseline.problem and not baseline.outcomes and not opts.probe:
            baseline.problem = f"the test command ran no tests (exit {baseline.returncode}): nothing would be verified"
        elif not is_pytest and baseline.returncode != 0:  # one pass/fail outcome: a failing one verifies nothing
            baseline.problem = f"the test command fails on the original code (exit {baseline.returncode})"
        report["baseline"] = baseline.to_json()
        if baseline.problem:
            report["verdict"] = "baseline-failed"
            message = f"error: cannot verify; the tests on the original code: {baseline.problem}\n{baseline.log_tail}"
            return EXIT_USAGE
        say(f"baseline: {_summary(baseline)}")
        for path, data in migrated.items():
            write_atomically(path, data)
        say(f"migrated {len(migrated)} file(s); running the tests again")
        after = run_tests(argv, is_pytest, root, opts.timeout, workdir, "after")
        report["after"] = after.to_json()
        verdict = compare(baseline.outcomes, after.outcomes)
        if not after.problem:
            say(f"after:    {_summary(after)}")
        if opts.probe:
            say("probing the migrated modeling files against the originals")
            probes = run_probes(list(migrated), backup, workdir)
            report["probe"] = {path: [dataclasses.asdict(c) for c in checks] for path, checks in probes.items()}
            verdict["regressions"] += [
                Regression(f"probe {Path(path).name}::{c.name}", "original", c.status, c.detail)
                for path, checks in probes.items()
                for c in checks
                if c.status in ("fail", "error")
            ]
        report.update({key: [_plain(v) for v in values] for key, values in verdict.items()})
        for test in verdict["preexisting"]:
            say(f"pre-existing failure (failed before the migration too; not blamed): {test}")
        for test in verdict["improvements"]:
            say(f"fixed by the migration: {test}")
        for test in verdict["vanished"]:
            say(f"warning: vanished after the migration: {test}")
        if not after.problem and not verdict["regressions"]:
            restore, report["verdict"] = False, "ok"
            say(f"verified: no test regressed; {len(migrated)} file(s) migrated")
            return code
        restore = not opts.keep
        report["verdict"] = (
            "regression" if verdict["regressions"] else "timeout" if after.returncode is None else "cannot-run"
        )
        lines = [f"the tests on the migrated code: {after.problem}\n{after.log_tail}"] if after.problem else []
        if verdict["regressions"]:
            lines.append(f"{len(verdict['regressions'])} regression(s) after the migration:")
            lines.append(format_regressions(verdict["regressions"]))
        message, to_stderr = "\n".join(lines), False
        return EXIT_REGRESSION
    except Interrupted as exc:
        report["verdict"], message = "interrupted", f"interrupted by {exc}: stopped the tests"
        return 128 + exc.signum
    finally:
        for sig in previous:  # nothing may interrupt the restore
            signal.signal(sig, signal.SIG_IGN)
        restored = backup.restore() if restore else []
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        shutil.rmtree(workdir, ignore_errors=True)
        report["restored"] = bool(restored)
        if message:
            click.echo(message, err=to_stderr)
        if restored:
            click.echo(f"restored the original bytes of {len(restored)} file(s): {', '.join(map(str, restored))}")
        elif not restore and report["verdict"] != "ok":
            click.echo(f"--keep: the migrated files were left in place: {', '.join(map(str, migrated))}")
        _write_report(opts.report, report, started)


def _write_report(path: Path | None, report: dict, started: float) -> None:
    """The JSON report of ``--report``: files, verdict, baseline/after counts, regressions, probe results."""
    if path is not None:
        report["seconds"] = round(time.perf_counter() - started, 2)
        path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
