"""Keep the user's own statements wherever a replacement leaves them as they were.

A rule rewrites a run of statements from a template. Statements of the template that come out equal to one of
the matched statements (layout aside) are replaced by that original statement, with its comments, blank lines
and formatting; a compound statement whose header changed keeps its original block where the block did not
change. The diff a user reviews is then only what the rule meant to change."""

from __future__ import annotations

import difflib
from typing import Callable, Sequence

import libcst as cst

from ..views.patterns import code_of

Reformat = Callable[[cst.BaseStatement, int], cst.BaseStatement]
_COMPOUND = (cst.If, cst.For, cst.While, cst.With)


def preserve(
    new: Sequence[cst.BaseStatement],
    old: Sequence[cst.BaseStatement],
    reformat: Reformat | None = None,
    depth: int = 0,
) -> list[cst.BaseStatement]:
    old_codes = [_key(s) for s in old]
    new_codes = [_key(s) for s in new]
    out: list[cst.BaseStatement] = []
    matcher = difflib.SequenceMatcher(None, old_codes, new_codes, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out.extend(old[i1:i2])
        elif tag == "replace" and i2 - i1 == j2 - j1 and all(_alike(o, n) for o, n in zip(old[i1:i2], new[j1:j2])):
            out.extend(_merge(o, n, reformat, depth) for o, n in zip(old[i1:i2], new[j1:j2]))
        else:
            fresh = [_fresh(n, reformat, depth) for n in new[j1:j2]]
            lines = _comments_of(old[i1:i2])
            if fresh and lines and hasattr(fresh[0], "leading_lines"):
                fresh[0] = fresh[0].with_changes(leading_lines=lines)
            out.extend(fresh)
    kept = any(stmt is old[0] for stmt in out) if old else True
    if out and not kept and getattr(old[0], "leading_lines", None) and hasattr(out[0], "leading_lines"):
        out[0] = out[0].with_changes(leading_lines=old[0].leading_lines)  # the run's comments stay on top
    return out


def _alike(old: cst.BaseStatement, new: cst.BaseStatement) -> bool:
    """A compound statement whose header changed: its block (and comments) stay where they are."""
    return type(old) is type(new) and isinstance(new, _COMPOUND)


def _comments_of(run: Sequence[cst.BaseStatement]) -> list[cst.EmptyLine]:
    """The lines above the first statement of a replaced run, then every comment line above the others: what
    they say is about the code the replacement does now, so it goes above all of it (a comment on the `torch.cat`
    of a past goes above the `update()` that concatenates now, not beside the reshape after it)."""
    if not run:
        return []
    lines = list(getattr(run[0], "leading_lines", ()))
    for stmt in run[1:]:
        lines.extend(line for line in getattr(stmt, "leading_lines", ()) if line.comment is not None)
    return lines


def _key(stmt: cst.BaseStatement) -> str:
    """The statement's code with every space and line break taken out: the same code in another layout (a
    call split over lines, say) compares equal, and so does the same line with a comment after it."""
    if hasattr(stmt, "leading_lines"):
        stmt = stmt.with_changes(leading_lines=[])  # comments above it are not its code
    if isinstance(stmt, cst.SimpleStatementLine):
        stmt = stmt.with_changes(trailing_whitespace=cst.TrailingWhitespace())  # nor is the one after it
    return "".join(code_of(stmt).split())


def _fresh(stmt: cst.BaseStatement, reformat: Reformat | None, depth: int) -> cst.BaseStatement:
    return reformat(stmt, depth) if reformat is not None else stmt


def _merge(old: cst.BaseStatement, new: cst.BaseStatement, reformat: Reformat | None, depth: int) -> cst.BaseStatement:
    """``new`` in place of ``old``: its comments kept; for a compound statement, the unchanged part of its
    block kept too."""
    if type(old) is type(new) and isinstance(new, _COMPOUND):
        body = preserve(new.body.body, old.body.body, reformat, depth + 1)
        merged = new.with_changes(body=old.body.with_changes(body=body), leading_lines=old.leading_lines)
        orelse_old, orelse_new = getattr(old, "orelse", None), getattr(new, "orelse", None)
        if orelse_new is not None and type(orelse_old) is type(orelse_new):
            if isinstance(orelse_new, cst.Else):
                block = preserve(orelse_new.body.body, orelse_old.body.body, reformat, depth + 1)
                merged = merged.with_changes(
                    orelse=orelse_old.with_changes(body=orelse_old.body.with_changes(body=block))
                )
            else:
                merged = merged.with_changes(orelse=_merge(orelse_old, orelse_new, reformat, depth))
        return _fresh(merged, reformat, depth)
    if hasattr(new, "leading_lines") and hasattr(old, "leading_lines"):
        new = new.with_changes(leading_lines=old.leading_lines)
    return _fresh(new, reformat, depth)
