"""The engine's hook for ``# cachemigrate: skip`` at the end of a statement (see :mod:`cachemigrate.source.suppression`).

The engine calls :func:`leave_out` with the plan of every rule: each edit whose claimed region (as the region
proof computes it, :func:`cachemigrate.proof.audit.claims_of`) overlaps a marked statement is dropped; an insertion
counts only when it falls strictly inside one. The rest of the engine runs as usual on the smaller plan, so the
all-or-nothing rule still holds: a tuple use the dropped edits would have rewritten is reported (CM900) and the
file is left unchanged. :meth:`Suppressed.explain` then adds one CM907 per marked statement whose edits were
dropped, naming the comment, and reports as such a result that only the dropped edits broke (an unbound name, a
region the applier could not keep).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import libcst as cst

from .. import diagnostics as codes
from ..proof.audit import Offsets, claims_of
from ..diagnostics import Diagnostic
from .edits import Plan, Rename
from ..source.suppression import MARK, is_skip_comment


@dataclasses.dataclass(frozen=True)
class _Marked:
    start: int  # character offsets of the statement (a compound statement: its header) in the original text
    end: int
    line: int  # the line of the comment


@dataclasses.dataclass
class Suppressed:
    """What :func:`leave_out` dropped, per marked statement line: the rules whose edits were left out."""

    path: str = ""
    dropped: dict[int, list[str]] = dataclasses.field(default_factory=dict)

    def explain(self, status: str, diagnostics: Sequence[Diagnostic]) -> tuple[str, list[Diagnostic]]:
        """A failed result gets a CM907 per marked statement whose edits were dropped. An internal error (a name
        left unbound, a region the applier could not keep) is what dropping them did: it is replaced by those."""
        diagnostics = list(diagnostics)
        if not self.dropped or status not in ("failed", "error"):
            return status, diagnostics
        if status == "error":
            diagnostics = [d for d in diagnostics if d.code != codes.REGION_VIOLATION]
        for line, rules in sorted(self.dropped.items()):
            diagnostics.append(
                Diagnostic(
                    self.path,
                    line,
                    1,
                    codes.SUPPRESSED,
                    f"`# cachemigrate: skip` keeps this statement as it is: the edits of "
                    f"{', '.join(dict.fromkeys(rules))} were left out, and the file cannot be migrated without "
                    "them, so it was left unchanged. Migrate the statement by hand, or remove the comment",
                )
            )
        return "failed", diagnostics


NOTHING = Suppressed()


class _Finder(cst.CSTVisitor):
    """Statements whose last line (a compound statement: its header) ends with the comment, with their paths."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[cst.CSTNode] = []
        self.found: list[tuple[cst.CSTNode, tuple[cst.CSTNode, ...], bool]] = []  # node, path, header only

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.SimpleStatementLine):
            if _marked(node.trailing_whitespace):
                self.found.append((node, tuple(self.stack), False))
            return False  # nothing below a simple statement line carries a statement mark
        if isinstance(node, cst.BaseCompoundStatement):
            body = getattr(node, "body", None)
            if isinstance(body, cst.IndentedBlock) and _marked(body.header):
                self.found.append((node, tuple(self.stack), True))
            elif isinstance(body, cst.SimpleStatementSuite) and _marked(body.trailing_whitespace):
                self.found.append((node, tuple(self.stack), False))  # `if x: y  # ...`: all of it
        self.stack.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if self.stack and self.stack[-1] is original_node:
            self.stack.pop()


def _marked(whitespace: cst.TrailingWhitespace) -> bool:
    return whitespace.comment is not None and is_skip_comment(whitespace.comment.value)


def _marked_statements(module: cst.Module, offsets: Offsets) -> list[_Marked]:
    finder = _Finder()
    module.visit(finder)
    marked = []
    for node, path, header in finder.found:
        start, end = offsets.span(node, path)
        if header:
            end = offsets.span(node.body, (*path, node))[0]
            line = offsets.line_of(end)  # the header's last line, where the colon and the comment are
        else:
            line = offsets.line_of(max(start, end - 1))  # the statement's last line
        marked.append(_Marked(start, end, line))
    return marked


def leave_out(module: cst.Module, plan: Plan, code: str, path: str) -> tuple[Plan, Suppressed]:
    """The plan without the edits of marked statements, and what was left out. Costs nothing when the text has
    no ``cachemigrate:`` comment."""
    if MARK not in code or not len(plan):
        return plan, NOTHING
    offsets = Offsets(module)
    marked = _marked_statements(module, offsets)
    if not marked:
        return plan, NOTHING
    kept, suppressed = Plan(), Suppressed(path)
    for edit in plan:
        hit = None if isinstance(edit, Rename) else _overlapping(edit, marked, offsets)
        if hit is None:
            kept.extend([edit])
        else:
            suppressed.dropped.setdefault(hit.line, []).append(edit.rule)
    return (kept, suppressed) if suppressed.dropped else (plan, NOTHING)


def _overlapping(edit, marked: Sequence[_Marked], offsets: Offsets) -> _Marked | None:
    for claim in claims_of([edit], (), offsets):
        for statement in marked:
            if claim.start == claim.end:
                if statement.start < claim.start < statement.end:  # an insertion inside the statement
                    return statement
            elif claim.start < statement.end and statement.start < claim.end:
                return statement
    return None
