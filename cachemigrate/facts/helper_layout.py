"""The layout of a past an attention concatenates in a projection helper of its own.

Some attentions do not concatenate the layer past in their own body: they hand its key tensor and its value tensor
to a function nested in ``forward`` (``project(hidden_states, self.k, key_value_states, past_key_value[0] if
past_key_value is not None else None)``, the same for ``past_key_value[1]`` with ``self.v``), whose own parameter
is concatenated there (``torch.cat([past, states], dim=2)``). The layout is read off that concatenation, the rank
of the new tensor coming from the helper's code (and from what the sibling helpers it calls return)."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from .layout_types import Layout, TensorLayout, Unknown
from ..traverse import findall
from ..views.patterns import code_of
from ..views.ranks import RankScope, int_literal, iter_small_statements


def _params(function: cst.FunctionDef) -> list[str]:
    return [p.name.value for p in (*function.params.posonly_params, *function.params.params)]


def _nested(function: cst.FunctionDef) -> dict[str, cst.FunctionDef]:
    """The functions defined directly in ``function``'s body (not in its nested classes or functions)."""
    return {stmt.name.value: stmt for stmt in function.body.body if isinstance(stmt, cst.FunctionDef)}


def _part_read(node: cst.BaseExpression, cache: str) -> int | None:
    """``cache[i]`` or ``cache[i] if cache is not None else None``: i."""
    if isinstance(node, cst.IfExp):
        if not m.matches(node.orelse, m.Name("None")):
            return None
        node = node.body
    index = m.Subscript(value=m.Name(cache), slice=[m.SubscriptElement(m.Index(m.Integer()))])
    if not m.matches(node, index):
        return None
    return int(node.slice[0].slice.value.value)


def helper_calls(function: cst.FunctionDef, cache: str) -> list[tuple[cst.Call, cst.FunctionDef, int, int]]:
    """The calls of a nested helper that hand it one tensor of the layer past: (call, helper, position of the
    argument, index of the tensor in the layer past)."""
    helpers = _nested(function)
    found = []
    for call in findall(function.body, m.Call(func=m.Name())):
        helper = helpers.get(call.func.value)
        if helper is None:
            continue
        for position, arg in enumerate(call.args):
            if arg.keyword is not None or arg.star:
                continue
            part = _part_read(arg.value, cache)
            if part is not None and position < len(_params(helper)):
                found.append((call, helper, position, part))
    return found


def helper_concatenation(function: cst.FunctionDef, cache: str):
    """(helper, its ``torch.cat`` of the past parameter, the new tensor, the dim node, a rank scope of the helper
    up to that statement) where ``function`` hands ``cache[0]`` and ``cache[1]`` to one nested helper at one
    argument position and the helper concatenates that parameter first; else None."""
    calls = helper_calls(function, cache)
    parts = {(helper.name.value, position): set() for _, helper, position, _ in calls}
    for _, helper, position, part in calls:
        parts[(helper.name.value, position)].add(part)
    chosen = [key for key, seen in parts.items() if seen == {0, 1}]
    if len(chosen) != 1 or len(parts) != 1:
        return None
    name, position = chosen[0]
    helper = _nested(function)[name]
    param = _params(helper)[position]
    cat = m.Call(
        func=m.Attribute(value=m.Name("torch"), attr=m.Name("cat") | m.Name("concat") | m.Name("concatenate")),
        args=[
            m.Arg(m.List([m.Element(m.Name(param)), m.Element()]) | m.Tuple([m.Element(m.Name(param)), m.Element()])),
            m.Arg(keyword=m.Name("dim") | m.Name("axis")),
        ],
    )
    siblings = _nested(function)
    scope = RankScope(lookup=lambda dotted, index: _returned_rank(siblings.get(dotted)))
    for small in iter_small_statements(helper.body):
        found = findall(small, cat)
        if found:
            call = found[0]
            return helper, call, call.args[0].value.elements[1].value, call.args[1].value, scope
        scope.statement(small)
    return None


def _returned_rank(helper: cst.FunctionDef | None) -> int | None:
    """The rank of what a sibling helper returns, where every return says the same."""
    if helper is None:
        return None
    scope = RankScope()
    ranks = set()
    for small in iter_small_statements(helper.body):
        if isinstance(small, cst.Return) and small.value is not None:
            ranks.add(scope.rank(small.value))
        else:
            scope.statement(small)
    return ranks.pop() if len(ranks) == 1 else None


def helper_layout(function: cst.FunctionDef, cache: str) -> Layout | None:
    """The layout of a past concatenated in a nested projection helper, or None where the attention hands it to
    none; raises :class:`Unknown` where it hands it in a way that shows no layout."""
    found = helper_concatenation(function, cache)
    if found is None:
        calls = helper_calls(function, cache)
        if calls:  # one part handed over, or the two in different ways: the helper's concatenation is not a layout
            call, helper, position, part = calls[0]
            raise Unknown(
                f"`{code_of(call.func)}(...)` is handed `{cache}[{part}]` as its argument {position + 1}, but the "
                f"keys (`{cache}[0]`) and the values (`{cache}[1]`) are not both handed to `{helper.name.value}` "
                "as the same positional argument, so where it concatenates the past is not a layout of the cache",
                node=call,
            )
        return None
    _, call, new, dim, scope = found
    axis, rank = int_literal(dim), scope.rank(new)
    if axis is None or (axis >= 0 and rank is None):
        raise Unknown(
            f"the projection helper concatenates the past (`{code_of(call)}`), but the rank of `{code_of(new)}` "
            "is not known, so its sequence axis cannot be told",
            node=call,
        )
    tensor = TensorLayout(rank, axis - rank if axis >= 0 else axis)
    return Layout("pair", tensor, tensor, through="helper")
