"""Results: the statuses, the table, the one-line summary and the exit status of ``cachemigrate probe``."""

from __future__ import annotations

from dataclasses import dataclass

PASS, FAIL, SKIP, ERROR, SETUP_ERROR = "pass", "fail", "skip", "error", "setup-error"
DIVERGED = (FAIL, ERROR)  # the migrated file behaves differently: a regression
EXIT_OK, EXIT_DIVERGED, EXIT_SETUP = 0, 1, 2


@dataclass
class CheckResult:
    """The outcome of one check.

    ``status``: "pass"; "fail" (a comparison found a difference); "error" (the migrated model raised on a path the
    original runs); "skip" (does not apply); "setup-error" (the check, or the whole probe for the result named
    ``setup``, cannot run on the original: a problem of the probe's set-up, not of the migration).
    """

    name: str
    status: str
    detail: str = ""
    seconds: float = 0.0


def format_table(results: list[CheckResult]) -> str:
    """Plain-text table: check | status | detail | seconds."""
    header = ("check", "status", "detail", "seconds")
    rows = [(r.name, r.status, r.detail, f"{r.seconds:.2f}") for r in results]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]

    def line(row) -> str:
        cells = [row[i].ljust(widths[i]) for i in range(3)] + [row[3].rjust(widths[3])]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(row) for row in rows)])


def is_setup_failure(results: list[CheckResult]) -> bool:
    """True when the probe could not be set up at all (the single ``setup`` result)."""
    return len(results) == 1 and results[0].name == "setup" and results[0].status == SETUP_ERROR


def exit_status(results: list[CheckResult]) -> int:
    """0: every check passed or was skipped; 1: a divergence (fail, or error in the migrated file only);
    2: set-up errors and no divergence."""
    if any(r.status in DIVERGED for r in results):
        return EXIT_DIVERGED
    if any(r.status == SETUP_ERROR for r in results):
        return EXIT_SETUP
    return EXIT_OK


def summary_line(results: list[CheckResult], seconds: float) -> str:
    """``probe: 14 passed, 2 skipped, 0 diverged (8.1 s)``, plus the set-up errors when there are any."""
    if is_setup_failure(results):
        return f"probe: set-up error, no check ran ({seconds:.1f} s)"
    count = {status: sum(r.status == status for r in results) for status in (PASS, SKIP, SETUP_ERROR)}
    diverged = sum(r.status in DIVERGED for r in results)
    parts = [f"{count[PASS]} passed", f"{count[SKIP]} skipped", f"{diverged} diverged"]
    if count[SETUP_ERROR]:
        parts.append(f"{count[SETUP_ERROR]} set-up error{'s' if count[SETUP_ERROR] > 1 else ''}")
    return f"probe: {', '.join(parts)} ({seconds:.1f} s)"
