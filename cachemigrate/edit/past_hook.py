"""The fix of a generation hook written before transformers 4.26 (:mod:`cachemigrate.facts.past_hook`), applied
only with the explicit option ``--fix-past-hook``: the file is fixed, then migrated as usual.

In each such hook the parameter ``past`` becomes ``past_key_values`` (the name ``generate()`` passes since 4.26),
every read of ``past`` in the hook reads ``past_key_values``, and ``past`` stays an alias for callers that pass it
by keyword: ``past_key_values = kwargs.pop("past", past_key_values)``, first in the hook (a positional caller's
past is the renamed parameter). The alias tests nothing, so the first generation step (an empty Cache) is told by
the rules that ask a Cache for its length (CM103, CM104), as in any other hook. Nothing else changes: the module
is rebuilt by libcst with only these nodes replaced, and the lines outside the hooks are checked to be the
original's, byte for byte."""

from __future__ import annotations

import dataclasses

import libcst as cst
import libcst.matchers as m

from ..facts.past_hook import PastHook
from ..traverse import findall

NEW = "past_key_values"


class FixError(Exception):
    """The fix changed code outside the hooks (a bug: the file is left unchanged)."""


@dataclasses.dataclass
class Fixed:
    code: str
    inserted: list[int]  # lines of the fixed code that the fix inserted (one alias per hook)
    hooks: list[int]  # the original line of each hook's `past` parameter

    def original_line(self, line: int) -> int:
        """The original line of a line of the fixed code (an inserted line: its hook's parameter)."""
        if line in self.inserted:
            return self.hooks[self.inserted.index(line)]
        return line - sum(1 for inserted in self.inserted if inserted < line)


def why_not(hook: PastHook) -> str | None:
    """Why the fix does not apply to ``hook`` (said for users), or None."""
    node = hook.function.node
    if node.params.star_kwarg is None or not isinstance(node.params.star_kwarg, cst.Param):
        return "it takes no `**kwargs` to keep `past` as an alias in"
    if findall(node, m.Name(NEW)):
        return f"it already reads a name `{NEW}`"
    if findall(node.body, m.FunctionDef() | m.Lambda() | m.ClassDef()):
        return "it defines a function, lambda or class of its own"
    return None


def fix_past_hooks(module: cst.Module, hooks: list[PastHook], locate) -> Fixed:
    """The module with every hook fixed (each must pass :func:`why_not`)."""
    fixer = _Fixer({hook.function.node for hook in hooks})
    code = module.visit(fixer).code
    starts = sorted((locate(fixer.first[hook.function.node])[0], locate(hook.parameter)[0]) for hook in hooks)
    inserted = [line + index for index, (line, _) in enumerate(starts)]
    fixed = Fixed(code, inserted, [parameter for _, parameter in starts])
    _check(module.code, fixed, [(locate(h.function.node)[0], locate.last_line(h.function.node)) for h in hooks])
    return fixed


class _Fixer(cst.CSTTransformer):
    def __init__(self, hooks: set[cst.FunctionDef]) -> None:
        super().__init__()
        self.hooks = hooks
        self.inside: cst.FunctionDef | None = None
        self.first: dict[cst.FunctionDef, cst.CSTNode] = {}  # the statement the alias goes before

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if node in self.hooks:
            self.inside = node
            self.keywords = {a.keyword for a in findall(node, m.Arg(keyword=m.Name()))}
            self.attributes = {a.attr for a in findall(node, m.Attribute())}
            body = node.body.body
            docstring = bool(body) and m.matches(body[0], m.SimpleStatementLine([m.Expr(m.SimpleString())]))
            self.first[node] = body[1 if docstring and len(body) > 1 else 0]

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        if self.inside is not None and original.value == "past" and original not in self.keywords | self.attributes:
            return updated.with_changes(value=NEW)
        return updated

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        if original is not self.inside:
            return updated
        self.inside = None
        kwargs = original.params.star_kwarg.name.value
        alias = cst.parse_statement(f'{NEW} = {kwargs}.pop("past", {NEW})\n')
        body = list(updated.body.body)
        index = list(original.body.body).index(self.first[original])
        body.insert(index, alias)
        return updated.with_changes(body=updated.body.with_changes(body=body))


def _check(original: str, fixed: Fixed, spans: list[tuple[int, int]]) -> None:
    """Outside the hooks (``spans``: first and last original line of each) the fixed code is the original, line
    for line: the region proof of the fix."""
    old = original.splitlines(keepends=True)
    new = [line for number, line in enumerate(fixed.code.splitlines(keepends=True), 1) if number not in fixed.inserted]
    changed = [n for n, (a, b) in enumerate(zip(old, new), 1) if a != b]
    if len(old) != len(new) or any(not any(first <= n <= last for first, last in spans) for n in changed):
        raise FixError("the past hook fix changed code outside the hooks it fixes")
