"""A CM900 ("no rule rewrites this idiom") left where the rules that do rewrite it could not run: the layout of the
cached keys and values is not known (a CM901 says why, at the construct that hides it: GPT-Neo 4.6's local layers,
whose past holds the hidden states they were given, not keys and values). Such an idiom is not unknown, it is
blocked, and the message says so and points at the blocker, so that the user fixes one thing, not every use."""

from __future__ import annotations

import dataclasses

from .. import diagnostics as codes
from ..diagnostics import NO_RULE, Diagnostic

# what planning says in a CM901 whose rule needed the layout (rules/planning.py, `_why_unknown`)
LAYOUT_UNKNOWN = "the layout of the cached keys and values is not known"


def blocked_by_layout(found: list[Diagnostic]) -> list[Diagnostic]:
    """``found`` with each CM900 "no rule rewrites this idiom" reworded to name the CM901 of an unknown layout, when
    there is one (the first, by line)."""
    blockers = sorted(
        (d for d in found if d.code == codes.RULE_NOT_APPLIED and LAYOUT_UNKNOWN in d.message), key=lambda d: d.line
    )
    if not blockers:
        return found
    line = blockers[0].line
    tail = (
        "and it was not rewritten: the rules that rewrite it need the layout of the cached keys and values, which "
        f"this file does not show (the CM901 at line {line} says why); the file was left unchanged. Migrate that "
        "construct by hand first (this statement with it, where it belongs to it); the rules can then rewrite the rest"
    )
    return [
        dataclasses.replace(d, message=f"{d.message[: -len(NO_RULE)].rstrip()} {tail}")
        if d.code == codes.UNKNOWN_IDIOM and d.message.endswith(NO_RULE)
        else d
        for d in found
    ]
