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
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import click

from .engine import FileResult, Options
from .runner import Failure, failed, run
from .signals import Interrupted, StopOnSignal
from .writing import is_read_only, read_only_diagnostic, write_atomically

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 123
PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"
BROKEN = (FAILED, ERROR)
_SEVERITY = {PASSED: 0, SKIPPED: 1, FAILED: 2, ERROR: 3}


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


@dataclasses.dataclass
class Outcome:
    status: str  # passed | failed | error | skipped
    message: str = ""  # the first lines of the failure


@dataclasses.dataclass
class SuiteRun:
    outcomes: dict[str, Outcome]
    returncode: int | None
    seconds: float
    problem: str | None = None  # why the run gave no usable result (timeout, no report)
    log_tail: str = ""

    def counts(self) -> dict[str, int]:
        """Number of tests per status."""
        counts = {status: 0 for status in _SEVERITY}
        for outcome in self.outcomes.values():
            counts[outcome.status] += 1
        return counts

    def to_json(self) -> dict:
        """Counts, exit status, duration and problem, for the report."""
        seconds = round(self.seconds, 2)
        return {"counts": self.counts(), "returncode": self.returncode, "seconds": seconds, "problem": self.problem}


@dataclasses.dataclass
class Regression:
    test: str
    before: str
    after: str
    message: str


# ----------------------------------------------------------------------------------------------------------------
# Running the tests
# ----------------------------------------------------------------------------------------------------------------


def find_root(files: list[Path]) -> Path | None:
    """The nearest common ancestor of ``files`` that holds a ``tests/`` folder or a ``pyproject.toml``."""
    start = Path(os.path.commonpath([str(p.resolve().parent) for p in files]))
    for folder in (start, *start.parents):
        if (folder / "tests").is_dir() or (folder / "pyproject.toml").is_file():
            return folder
    return None


def build_test_command(spec: str | None, root: Path) -> tuple[list[str], bool]:
    """The argv of the test command and whether it is pytest. A leading ``python`` is this interpreter."""
    if spec is None:
        argv = [sys.executable, "-m", "pytest", *(["tests"] if (root / "tests").is_dir() else [])]
    else:
        argv = shlex.split(spec)
        if not argv:
            raise ValueError("the --tests command is empty")
        if argv[0] in ("python", "python3"):
            argv[0] = sys.executable
    is_pytest = Path(argv[0]).name in ("pytest", "py.test") or argv[1:3] == ["-m", "pytest"]
    return argv, is_pytest


def _kill_group(process: subprocess.Popen) -> None:
    """SIGTERM the whole process group of ``process``, then SIGKILL it if it is still there after 5 s."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_tests(argv: list[str], is_pytest: bool, cwd: Path, timeout: float, workdir: Path, label: str) -> SuiteRun:
    """Run the test command in its own process group; outcomes from pytest's JUnit XML, else from the exit code."""
    junit, log = workdir / f"{label}.xml", workdir / f"{label}.log"
    command = [*argv, f"--junitxml={junit}"] if is_pytest else argv
    started = time.perf_counter()
    with open(log, "wb") as output:
        process = subprocess.Popen(
            command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            returncode, problem = process.wait(timeout=timeout), None
        except subprocess.TimeoutExpired:
            returncode, problem = None, f"timed out after {timeout:g} s (the test processes were killed)"
        finally:  # a timeout, Ctrl-C or SIGTERM: no test process outlives the run
            if process.returncode is None:
                _kill_group(process)
    seconds = time.perf_counter() - started
    tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:])
    if problem:
        return SuiteRun({}, returncode, seconds, problem, tail)
    if not is_pytest:
        message = "" if returncode == 0 else f"exit status {returncode}\n{tail}"
        return SuiteRun(
            {shlex.join(argv): Outcome(PASSED if returncode == 0 else FAILED, message)}, returncode, seconds
        )
    try:
        return SuiteRun(parse_junit(junit), returncode, seconds, None, tail)
    except (OSError, ET.ParseError) as exc:
        return SuiteRun(
            {}, returncode, seconds, f"pytest wrote no readable JUnit report (exit {returncode}: {exc})", tail
        )


def _first_lines(message: str, text: str, count: int = 3) -> str:
    """The first lines of a failure: pytest's message attribute, else the ``E`` lines of the traceback."""
    lines = [line.rstrip() for line in message.splitlines() if line.strip()]
    if not lines:
        lines = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    return "\n".join(line[:200] for line in lines[:count])


def parse_junit(path: Path) -> dict[str, Outcome]:
    """``classname::name`` -> Outcome for every testcase; a test reported twice (call and teardown) keeps the worst."""
    outcomes: dict[str, Outcome] = {}
    for case in ET.parse(path).iter("testcase"):
        test = "::".join(part for part in (case.get("classname"), case.get("name")) if part)
        outcome = Outcome(PASSED)
        for child in case:
            status = {"failure": FAILED, "error": ERROR, "skipped": SKIPPED}.get(child.tag)
            if status and _SEVERITY[status] > _SEVERITY[outcome.status]:
                outcome = Outcome(status, _first_lines(child.get("message") or "", child.text or ""))
        if test not in outcomes or _SEVERITY[outcome.status] > _SEVERITY[outcomes[test].status]:
            outcomes[test] = outcome
    return outcomes


def compare(before: dict[str, Outcome], after: dict[str, Outcome]) -> dict[str, list]:
    """Test-by-test comparison: regressions (passed or new -> failed/error), improvements, pre-existing failures
    (broken before and after: not blamed on the migration) and tests that vanished."""
    result: dict[str, list] = {"regressions": [], "improvements": [], "preexisting": [], "vanished": []}
    for test, old in before.items():
        new = after.get(test)
        if new is None:
            result["vanished"].append(test)
        elif old.status == PASSED and new.status in BROKEN:
            result["regressions"].append(Regression(test, old.status, new.status, new.message))
        elif old.status in BROKEN and new.status == PASSED:
            result["improvements"].append(test)
        elif old.status in BROKEN and new.status in BROKEN:
            result["preexisting"].append(test)
    for test, new in after.items():  # e.g. the collection error of a test module that no longer imports
        if test not in before and new.status in BROKEN:
            result["regressions"].append(Regression(test, "absent", new.status, new.message))
    return result


# ----------------------------------------------------------------------------------------------------------------
# Keeping the originals safe
# ----------------------------------------------------------------------------------------------------------------


class Backup:
    """The original bytes of the files about to change, in memory and in ``folder`` (with a MANIFEST)."""

    def __init__(self, paths: list[Path], folder: Path) -> None:
        self.originals = {path: path.read_bytes() for path in paths}
        folder.mkdir(parents=True)
        manifest = []
        for index, (path, data) in enumerate(self.originals.items()):
            (folder / f"{index}-{path.name}").write_bytes(data)
            manifest.append(f"{index}-{path.name}\t{path.resolve()}")
        (folder / "MANIFEST.txt").write_text("\n".join(manifest) + "\n", encoding="utf-8")

    def restore(self) -> list[Path]:
        """Put back, atomically, every file whose bytes differ from the original; returns those restored."""
        restored = []
        for path, data in self.originals.items():
            if not path.exists():
                path.write_bytes(data)
            elif path.read_bytes() != data:
                write_atomically(path, data)
            else:
                continue
            restored.append(path)
        return restored


def _raise_interrupted(signum, frame) -> None:
    """The SIGINT/SIGTERM handler: ignore further signals, then unwind through the restoring ``finally``."""
    for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal must not break the restore
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(signum)


def _install_handlers() -> dict:
    """Make SIGINT and SIGTERM raise :class:`Interrupted`; returns the previous handlers (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, _raise_interrupted) for sig in (signal.SIGINT, signal.SIGTERM)}


# ----------------------------------------------------------------------------------------------------------------
# The probe
# ----------------------------------------------------------------------------------------------------------------


def run_probes(paths: list[Path], backup: Backup, workdir: Path) -> dict[str, list]:
    """``run_probe(original copy, migrated)`` for each migrated ``modeling_*.py``. The original goes to a temp folder
    named like its own, with the original bytes of its sibling modules, so that relative imports still resolve."""
    from .probe import run_probe

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


def format_regressions(regressions: list[Regression]) -> str:
    """Plain-text table of the regressed tests, each followed by the first lines of its failure."""
    rows = [("test", "before", "after"), *((r.test, r.before, r.after) for r in regressions)]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]

    def line(cells) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths)).rstrip()

    lines = [line(rows[0]), "  ".join("-" * width for width in widths)]
    for regression, row in zip(regressions, rows[1:]):
        lines.append(line(row))
        lines.extend(f"    {text}" for text in regression.message.splitlines())
    return "\n".join(lines)


def _plain(value):
    """A Regression as a dict for the JSON report; anything else as it is."""
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value


def _summary(run_: SuiteRun) -> str:
    """``10 passed, 2 failed (8.1s)``."""
    counts = ", ".join(f"{n} {status}" for status, n in run_.counts().items() if n) or "no tests"
    return f"{counts} ({run_.seconds:.1f}s)"


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
