"""Running a fork's own tests (pytest with --junitxml, or any command) and comparing two runs test by test."""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 123
PASSED, FAILED, ERROR, SKIPPED = "passed", "failed", "error", "skipped"
BROKEN = (FAILED, ERROR)
_SEVERITY = {PASSED: 0, SKIPPED: 1, FAILED: 2, ERROR: 3}


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
        elif not _runnable(argv[0], root):
            raise ValueError(
                f"`{argv[0]}` is not a command: no such program on PATH (nor a file in {root}); "
                "give the command that runs the fork's tests"
            )
    is_pytest = Path(argv[0]).name in ("pytest", "py.test") or argv[1:3] == ["-m", "pytest"]
    return argv, is_pytest


def _runnable(program: str, cwd: Path) -> bool:
    """``program`` can be started from ``cwd``: a path to an executable file, or a name found on PATH."""
    if os.sep in program:
        path = Path(program) if Path(program).is_absolute() else cwd / program
        return path.is_file() and os.access(path, os.X_OK)
    return shutil.which(program) is not None


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
        try:
            process = subprocess.Popen(
                command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:  # not executable, a bad interpreter line...
            return SuiteRun({}, None, 0.0, f"cannot start `{argv[0]}`: {exc.strerror or exc}", "")
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
