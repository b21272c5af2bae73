"""Results: the statuses and the table."""

from __future__ import annotations

from dataclasses import dataclass

PASS, FAIL, SKIP, ERROR = "pass", "fail", "skip", "error"


@dataclass
class CheckResult:
    """The outcome of one check.

    ``status``: "pass"; "fail" (a comparison found a difference); "skip" (does not apply); "error" (it raised).
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
