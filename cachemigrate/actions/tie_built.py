"""A sub-model built with modules given as arguments, for :mod:`.tie_sources`: ``self.model = Model(config, encoder,
decoder)`` where ``encoder = TextEncoder(config)`` (a class of the file) and ``Model.__init__`` keeps it
(``self.encoder = encoder``, or ``Default(config) if encoder is None else encoder``). In that model ``self.encoder``
is a ``TextEncoder``: the sub-model is read as a copy of its class whose ``__init__`` builds those classes, and whose
methods' ``if isinstance(self.encoder, C):`` tests are decided (``get_input_embeddings`` picking a sub-module by its
class), so that what they return is one path."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst
import libcst.matchers as m

from ..traverse import findall
from .tie_code import method_locals, self_path


def given_classes(classes: dict, caller: cst.FunctionDef, call: cst.Call, callee: cst.FunctionDef) -> dict[str, str]:
    """The parameters of ``callee`` (an ``__init__``) that ``call`` in ``caller`` gives a module of a class of the
    file, built there (``Class(...)``, directly or through a name bound once): parameter -> class."""
    local = method_locals(caller)
    params = [p.name.value for p in callee.params.params][1:]  # after self
    given = {}
    for index, arg in enumerate(call.args):
        if arg.star:
            break
        key = arg.keyword.value if arg.keyword is not None else params[index] if index < len(params) else None
        value = arg.value
        if isinstance(value, cst.Name) and value.value in local:
            value = local[value.value]
        if key and m.matches(value, m.Call(m.Name())) and value.func.value in classes:
            given[key] = value.func.value
    return given


def _kept(value: cst.BaseExpression) -> str | None:
    """``p`` for ``p``, ``<default> if p is None else p`` and ``p if p is not None else <default>``."""
    if isinstance(value, cst.Name):
        return value.value
    if not isinstance(value, cst.IfExp) or not m.matches(value.test, m.Comparison(m.Name(), [m.ComparisonTarget()])):
        return None
    name, operator = value.test.left.value, value.test.comparisons[0]
    if not m.matches(operator.comparator, m.Name("None")):
        return None
    kept = value.orelse if isinstance(operator.operator, cst.Is) else value.body
    if not isinstance(operator.operator, (cst.Is, cst.IsNot)) or not m.matches(kept, m.Name(name)):
        return None
    return name


def kept_attributes(callee: cst.FunctionDef, given: dict[str, str]) -> dict[str, str]:
    """The attributes ``callee`` assigns once, keeping a given module: attribute -> its class."""
    found: dict[str, str] = {}
    counts: dict[str, int] = {}
    for assign in findall(callee, m.Assign([m.AssignTarget(m.Attribute(m.Name("self"), m.Name()))])):
        attribute = assign.targets[0].target.attr.value
        counts[attribute] = counts.get(attribute, 0) + 1
        kept = _kept(assign.value)
        if kept in given:
            found[attribute] = given[kept]
    return {a: c for a, c in found.items() if counts[a] == 1}


class _Specialize(cst.CSTTransformer):
    """``__init__`` builds each known attribute's class; ``if isinstance(self.<attribute>, C):`` is decided."""

    def __init__(self, known: dict[str, str], is_a: Callable[[str, str], bool | None]) -> None:
        super().__init__()
        self.known = known
        self.is_a = is_a
        self.depth = 0
        self.classes = 0

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.depth += 1
        return self.depth == 1  # methods of the class, not functions inside them

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self.depth -= 1
        return updated

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.classes += 1
        return self.classes == 1  # the class, not one defined inside it

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self.classes -= 1
        return updated

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        path = self_path(original.targets[0].target) if len(original.targets) == 1 else None
        if path in self.known and _kept(original.value) is not None:
            return updated.with_changes(value=cst.Call(cst.Name(self.known[path])))
        return updated

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        """What follows a ``return`` (or ``raise``) of a block is not reached: a decided test leaves the ``return
        self.decoder.get_input_embeddings()`` of its branch, and the ``return None`` after the tests goes."""
        ends = m.SimpleStatementLine([m.ZeroOrMore(), m.Return() | m.Raise(), m.ZeroOrMore()])
        body = list(updated.body)
        last = next((i for i, stmt in enumerate(body) if m.matches(stmt, ends)), None)
        return updated.with_changes(body=body[: last + 1]) if last is not None else updated

    def leave_If(self, original: cst.If, updated: cst.If):
        test = original.test
        if not m.matches(test, m.Call(m.Name("isinstance"), [m.Arg(), m.Arg(m.Name())])):
            return updated
        path = self_path(test.args[0].value)
        decided = self.is_a(self.known[path], test.args[1].value.value) if path in self.known else None
        if decided is None:
            return updated
        if decided:
            return cst.FlattenSentinel(updated.body.body)
        if updated.orelse is None:
            return cst.RemovalSentinel.REMOVE
        if isinstance(updated.orelse, cst.Else):
            return cst.FlattenSentinel(updated.orelse.body.body)
        return updated.orelse  # an `elif`: the `if` it is


def specialized(cls: cst.ClassDef, known: dict[str, str], is_a: Callable[[str, str], bool | None]) -> cst.ClassDef:
    """A copy of ``cls`` in which each attribute of ``known`` is a module of its class."""
    return cls.visit(_Specialize(known, is_a))
