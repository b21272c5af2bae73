"""What verify prints: the regressed tests with their failures, and one-line run summaries."""

from __future__ import annotations

import dataclasses

from .suite import Regression, SuiteRun


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
