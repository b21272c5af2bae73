"""Legacy cache converters a file defines, understood by what they do.

A converter is a function that takes a legacy cache (a tuple of per-layer ``(key, value)`` tuples) and returns one
in another layout, each tensor re-viewed::

    batch_size, num_heads, kv_length, head_dim = past_key_value[0][0].shape
    batch_size_times_num_heads = batch_size * num_heads
    return tuple(
        (layer_past[0].view(batch_size_times_num_heads, kv_length, head_dim), layer_past[1].view(...))
        for layer_past in past_key_value
    )

(Falcon's ``_convert_to_rw_cache``, BLOOM's ``_convert_to_standard_cache``...). A view never moves an axis, so a
converter can only merge or split axes; what matters to a migration is whether it **merges** the first two axes
(batch and heads) into one or **splits** the first axis in two (``view(batch_size, n // batch_size, ...)``),
keeping every other axis as it is. That is read off the shape names, for the key and for the value.

Such a function only ever handles tuples and stays as it is; a base model that converts the cache on the way in
and back on the way out (Falcon) shows its boundary layout through them (:mod:`cachemigrate.facts.boundary`).
"""

from __future__ import annotations

import dataclasses

import libcst as cst
import libcst.matchers as m

from .analysis import ModuleInfo
from ..views.patterns import code_of


@dataclasses.dataclass(frozen=True)
class Converter:
    """A converter method: its name, and what it does to the key and to the value: "merge" (the first two axes
    into one), "split" (the first axis into two), or None (something else)."""

    name: str
    key: str | None
    value: str | None
    qualname: str = ""

    @property
    def kind(self) -> str | None:
        return self.key if self.key == self.value else None


def find_converters(info: ModuleInfo) -> dict[str, Converter]:
    """The file's converters, by function name (they are called as ``self.<name>(...)``)."""
    found = {}
    for fn in info.functions.values():
        if fn.cls is None or not fn.cache_params:
            continue
        converter = _converter(fn.node, fn.cache_params[0], [p for p in fn.params if p not in ("self", "cls")])
        if converter is not None:
            found[fn.name] = dataclasses.replace(converter, qualname=fn.qualname)
    return found


def _converter(node: cst.FunctionDef, cache: str, params: list[str]) -> Converter | None:
    body = [s for s in node.body.body if not _is_docstring(s)]
    if not body or not all(isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 for s in body):
        return None
    *assignments, last = [s.body[0] for s in body]
    if not isinstance(last, cst.Return) or last.value is None:
        return None
    symbols: dict[str, tuple] = {p: ("param", p) for p in params if p != cache}
    axes: list[str] | None = None
    for assign in assignments:
        if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1):
            return None
        target, value = assign.targets[0].target, assign.value
        if isinstance(target, cst.Tuple) and _first_layer_shape(value, cache):
            names = [e.value.value if isinstance(e.value, cst.Name) else None for e in target.elements]
            if axes is not None or None in names:
                return None
            axes = names
            symbols.update({name: ("axis", i) for i, name in enumerate(names)})
        elif isinstance(target, cst.Name) and isinstance(value, cst.BinaryOperation):
            operator = {cst.Multiply: "*", cst.FloorDivide: "//"}.get(type(value.operator))
            left, right = _symbol(value.left, symbols), _symbol(value.right, symbols)
            if operator is None or left is None or right is None:
                return None
            symbols[target.value] = (operator, left, right)
        else:
            return None
    views = _per_layer_views(last.value, cache)
    if axes is None or views is None:
        return None
    key, value = (_kind([_symbol(a, symbols) for a in args], len(axes)) for args in views)
    return Converter(node.name.value, key, value)


def _first_layer_shape(value: cst.BaseExpression, cache: str) -> bool:
    """``cache[0][0].shape`` (or ``.size()``)."""
    layer = m.Subscript(value=m.Subscript(value=m.Name(cache)))
    return m.matches(value, m.Attribute(value=layer, attr=m.Name("shape"))) or m.matches(
        value, m.Call(func=m.Attribute(value=layer, attr=m.Name("size")), args=[])
    )


def _per_layer_views(value: cst.BaseExpression, cache: str) -> tuple[list, list] | None:
    """The view arguments of ``tuple((layer[0].view(...), layer[1].view(...)) for layer in cache)``."""
    if not m.matches(value, m.Call(func=m.Name("tuple"), args=[m.Arg(m.GeneratorExp())])):
        return None
    generator = value.args[0].value
    loop = generator.for_in
    if not (isinstance(loop.target, cst.Name) and m.matches(loop.iter, m.Name(cache)) and loop.inner_for_in is None):
        return None
    if loop.ifs or not isinstance(generator.elt, cst.Tuple) or len(generator.elt.elements) != 2:
        return None
    layer = loop.target.value
    found = []
    for index, element in enumerate(generator.elt.elements):
        call = element.value
        tensor = m.Subscript(value=m.Name(layer), slice=[m.SubscriptElement(m.Index(m.Integer(str(index))))])
        method = m.Attribute(value=tensor, attr=m.Name("view") | m.Name("reshape"))
        if not m.matches(call, m.Call(func=method)) or any(a.keyword or a.star for a in call.args):
            return None
        found.append([a.value for a in call.args])
    return found[0], found[1]


def _symbol(node: cst.BaseExpression, symbols: dict) -> tuple | None:
    if isinstance(node, cst.Name):
        return symbols.get(node.value)
    if isinstance(node, cst.BinaryOperation):
        operator = {cst.Multiply: "*", cst.FloorDivide: "//"}.get(type(node.operator))
        left, right = _symbol(node.left, symbols), _symbol(node.right, symbols)
        return (operator, left, right) if operator and left and right else None
    return None


def _kind(args: list, rank: int) -> str | None:
    """ "merge" for ``(a0 * a1, a2, ...)``, "split" for ``(q, a0 // q, a1, ...)``, else None."""
    axis = [("axis", i) for i in range(rank)]
    if len(args) == rank - 1 and args[0] == ("*", axis[0], axis[1]) and args[1:] == axis[2:]:
        return "merge"
    if (
        len(args) == rank + 1
        and args[0] is not None
        and args[1] == ("//", axis[0], args[0])
        and args[2:] == axis[1:]
        and args[0][0] == "param"
    ):
        return "split"
    return None


def _is_docstring(stmt: cst.CSTNode) -> bool:
    return m.matches(stmt, m.SimpleStatementLine(body=[m.Expr(m.SimpleString() | m.ConcatenatedString())]))


def converter_calls(function: cst.FunctionDef, converters: dict[str, Converter]) -> list[tuple[str, str, cst.Assign]]:
    """``x = self.<converter>(x, ...)`` statements of a function: (x, converter name, the assignment)."""
    found = []
    for assign in m.findall(function, m.Assign(targets=[m.AssignTarget(m.Name())])):
        value = assign.value
        target = assign.targets[0].target.value
        if (
            m.matches(value, m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name())))
            and value.func.attr.value in converters
            and value.args
            and code_of(value.args[0].value) == target
        ):
            found.append((target, value.func.attr.value, assign))
    return found
