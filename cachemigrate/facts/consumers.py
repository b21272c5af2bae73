"""Cache consumers: functions outside a model that read or edit a past handed to them (speculative-decoding
rollbacks, attention-sink eviction windows, length and layer reads), and the constructs the rules rewrite in them.

A *past* is a tuple, one ``(key, value)`` pair per layer, of tensors laid out ``[batch, heads, seq, head_dim]``,
the layout a ``Cache`` holds. A function's cache parameter is shown to be one when the function reads it layer by
layer as such pairs: ``past[i][0]`` / ``past[i][1]`` (with ``.shape[2]`` / ``.size(-2)`` reads), ``k, v = past[i]``,
or ``for k, v in past`` (a loop or a comprehension), or hands it to a function that does; one that only counts the
layers (``len(past)``) needs nothing (a Cache's length is its number of layers). A parameter with a cache's name that the function uses in no such
way (``for t in past``: single tensors) is not shown to be a past, and the function is reported, not rewritten.

Constructs (every one of them matched on the original code, none needs a view):

``length``      ``past[i][0].shape[2]``, ``.size(-2)``, ``.size()[2]``: the sequence length of a layer
``layer``       ``past[i][0]`` / ``past[i][1]``, ``k, v = past[i]``: one layer's keys or values
``rollback``    ``tuple((k[:, :, :end], v[:, :, :end]) for k, v in past)``, or the same rebuilt in a loop
``window``      a per-layer rebuild whose new keys and values are slices of the old ones on the sequence axis
                and concatenations of them on it (keep the first ``sink`` and the last ``recent`` positions)
``iterate``     ``for k, v in past`` / ``for i, (k, v) in enumerate(past)`` that is no rebuild: a loop that reads

A slice or a concatenation on another axis is a near miss: a Cache's layers stay ``[batch, heads, seq, head_dim]``
for the model that reads them next, so only the sequence may be edited (see :func:`sequence_edit`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import libcst as cst
import libcst.matchers as m

from .. import diagnostics as codes
from ..diagnostics import Diagnostic
from ..traverse import findall
from ..views.patterns import code_of
from .model import FunctionInfo

SEQUENCE_AXES = (2, -2)  # of a [batch, heads, seq, head_dim] tensor
_PARTS = {0: "keys", 1: "values"}
_PAIR = m.Tuple(elements=[m.Element(m.Name()), m.Element(m.Name())])


def _int(node: cst.CSTNode) -> int | None:
    if isinstance(node, cst.Integer):
        return int(node.value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = _int(node.expression)
        return -inner if inner is not None else None
    return None


def _index(sub: cst.Subscript) -> cst.BaseExpression | None:
    """The one plain index of ``x[i]`` (no slice, no tuple of indices)."""
    if len(sub.slice) == 1 and isinstance(sub.slice[0].slice, cst.Index):
        return sub.slice[0].slice.value
    return None


def layer_read(node: cst.CSTNode, cache: str) -> tuple[cst.BaseExpression, int] | None:
    """``cache[i][0]`` / ``cache[i][1]``: (the layer expression, 0 for the keys or 1 for the values)."""
    if not (isinstance(node, cst.Subscript) and isinstance(node.value, cst.Subscript)):
        return None
    inner = node.value
    if not m.matches(inner.value, m.Name(cache)):
        return None
    layer, part = _index(inner), _index(node)
    if layer is None or part is None or _int(part) not in _PARTS:
        return None
    return layer, _int(part)


def pair_read(assign: cst.CSTNode, cache: str) -> cst.BaseExpression | None:
    """``k, v = cache[i]``: the layer expression ``i``."""
    if not m.matches(assign, m.Assign(targets=[m.AssignTarget(_PAIR)], value=m.Subscript(value=m.Name(cache)))):
        return None
    return _index(assign.value)


@dataclasses.dataclass(frozen=True)
class LengthRead:
    node: cst.BaseExpression  # the whole read
    layer: cst.BaseExpression
    part: int
    axis: int | None  # None: not a constant


def length_read(node: cst.CSTNode, cache: str) -> LengthRead | None:
    """``cache[i][0].shape[k]``, ``.size(k)``, ``.size()[k]`` (any axis: the caller checks it)."""
    tensor = axis = None
    if isinstance(node, cst.Subscript) and _index(node) is not None:
        holder = node.value
        if m.matches(holder, m.Attribute(attr=m.Name("shape"))):
            tensor, axis = holder.value, _index(node)
        elif m.matches(holder, m.Call(func=m.Attribute(attr=m.Name("size")), args=[])):
            tensor, axis = holder.func.value, _index(node)
    elif m.matches(node, m.Call(func=m.Attribute(attr=m.Name("size")), args=[m.Arg(keyword=None)])):
        tensor, axis = node.func.value, node.args[0].value
    found = layer_read(tensor, cache) if tensor is not None else None
    if found is None:
        return None
    return LengthRead(node, found[0], found[1], _int(axis))


def slice_axis(sub: cst.Subscript) -> tuple[int | None, cst.Slice | None]:
    """The axis ``x[...]`` slices and the slice, in a 4-axis tensor: ``[:, :, s]`` / ``[:, :, s, :]`` -> 2,
    ``[..., s, :]`` -> -2. ``(None, None)`` when it selects (an index), slices several axes or none."""
    elements = [e.slice for e in sub.slice]
    ellipsis = [i for i, e in enumerate(elements) if isinstance(e, cst.Index) and isinstance(e.value, cst.Ellipsis)]
    if len(ellipsis) > 1:
        return None, None
    cut = [
        i
        for i, e in enumerate(elements)
        if i not in ellipsis and not (isinstance(e, cst.Slice) and e.lower is e.upper is e.step is None)
    ]
    if len(cut) != 1 or not isinstance(elements[cut[0]], cst.Slice) or len(elements) > 4:
        return None, None
    position = cut[0]
    if ellipsis:
        return (position - len(elements) if position > ellipsis[0] else position), elements[position]
    return position, elements[position]


@dataclasses.dataclass(frozen=True)
class Blocker:
    """Why an expression is not an edit of the sequence: the node, and the reason in words."""

    node: cst.CSTNode
    reason: str


_JOINS = m.Attribute(value=m.Name("torch"), attr=m.Name("cat") | m.Name("concat") | m.Name("concatenate"))


def sequence_edit(expr: cst.BaseExpression, names: dict[str, str]) -> tuple[str | None, Blocker | None]:
    """What ``expr`` derives from (``"keys"`` or ``"values"``) when it only slices and concatenates the named
    tensors (name -> what it holds) on the sequence axis, else the first construct that is something else."""
    if isinstance(expr, cst.Name) and expr.value in names:
        return names[expr.value], None
    if isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Name) and expr.value.value in names:
        axis, _ = slice_axis(expr)
        if axis in SEQUENCE_AXES:
            return names[expr.value.value], None
        where = f"axis {axis}" if axis is not None else "more than one axis, or selects"
        return None, Blocker(expr, f"`{code_of(expr)}` slices {where} of the cached tensor, not its sequence (axis 2)")
    if isinstance(expr, cst.Call) and m.matches(expr.func, _JOINS) and expr.args:
        dims = [a.value for a in expr.args[1:] if a.keyword is None or a.keyword.value in ("dim", "axis")]
        if (
            len(dims) != 1
            or _int(dims[0]) not in SEQUENCE_AXES
            or not isinstance(expr.args[0].value, (cst.Tuple, cst.List))
        ):
            return None, Blocker(expr, f"`{code_of(expr)}` concatenates on another axis than the sequence (dim 2)")
        sources = set()
        for element in expr.args[0].value.elements:
            source, blocker = sequence_edit(element.value, names)
            if blocker is not None:
                return None, blocker
            sources.add(source)
        return (
            (sources.pop(), None)
            if len(sources) == 1
            else (None, Blocker(expr, f"`{code_of(expr)}` mixes keys and values"))
        )
    return None, Blocker(
        expr, f"`{code_of(expr)}` is not a slice or a concatenation of the cached tensor on its sequence"
    )


@dataclasses.dataclass(frozen=True)
class Rebuild:
    """A per-layer rebuild of the past: ``statements`` of ``block`` (from ``index``) that read ``for k, v in cache``
    and give the new past back (``return`` it, or assign it to ``target``)."""

    block: cst.BaseSuite
    index: int
    count: int
    keys: str  # the loop's names for one layer's tensors
    values: str
    layer: str | None  # the loop's name for the layer index (`for i, (k, v) in enumerate(past)`)
    body: tuple[cst.BaseStatement, ...]  # the loop's own assignments (a loop form), in order
    new_keys: cst.BaseExpression
    new_values: cst.BaseExpression
    returns: bool  # the run ends with `return`; else it assigns the new past to `target`
    target: str | None
    end: cst.BaseExpression | None  # a rollback: what every tensor is cut to (`[:, :, :end]`)
    blocker: Blocker | None = None  # a rebuild whose tensors are not sequence edits (a near miss)


_TWO = m.Tuple(elements=[m.Element(), m.Element()]) | m.List(elements=[m.Element(), m.Element()])


def pairs_loop(target, iterable, cache: str) -> tuple[str, str, str | None] | None:
    """``for k, v in cache`` -> (k, v, None); ``for i, (k, v) in enumerate(cache)`` -> (k, v, i)."""
    if m.matches(iterable, m.Name(cache)) and m.matches(target, _PAIR):
        return target.elements[0].value.value, target.elements[1].value.value, None
    enumerated = m.Call(func=m.Name("enumerate"), args=[m.Arg(m.Name(cache), keyword=None)])
    if m.matches(iterable, enumerated) and m.matches(
        target, m.Tuple(elements=[m.Element(m.Name()), m.Element(_PAIR)])
    ):
        pair = target.elements[1].value
        return pair.elements[0].value.value, pair.elements[1].value.value, target.elements[0].value.value
    return None


def _comprehension(expr: cst.BaseExpression, cache: str):
    """``tuple((a, b) for k, v in cache)`` / ``tuple([...])`` / ``[[a, b] for ...]``: (k, v, layer, a, b)."""
    if m.matches(expr, m.Call(func=m.Name("tuple"), args=[m.Arg(keyword=None)])):
        expr = expr.args[0].value
    if not isinstance(expr, (cst.GeneratorExp, cst.ListComp)) or expr.for_in.inner_for_in or expr.for_in.ifs:
        return None
    names = pairs_loop(expr.for_in.target, expr.for_in.iter, cache)
    if names is None or not m.matches(expr.elt, _TWO):
        return None
    return (*names, expr.elt.elements[0].value, expr.elt.elements[1].value)


def _ends(stmt: cst.BaseStatement, value_of) -> tuple[bool, str | None, object] | None:
    """``return X`` / ``name = X`` with ``value_of(X)`` found: (returns, target, what value_of found)."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Return) and small.value is not None:
        found = value_of(small.value)
        return (True, None, found) if found is not None else None
    if m.matches(small, m.Assign(targets=[m.AssignTarget(m.Name())])):
        found = value_of(small.value)
        return (False, small.targets[0].target.value, found) if found is not None else None
    return None


def rebuilds(block: cst.BaseSuite, cache: str) -> list[Rebuild]:
    """The per-layer rebuilds of ``cache`` among the statements of ``block``."""
    found = []
    body = list(block.body)
    for index, stmt in enumerate(body):
        end = _ends(stmt, lambda value: _comprehension(value, cache))
        if end is not None:
            returns, target, (keys, values, layer, a, b) = end
            found.append(_rebuild(cache, block, index, 1, keys, values, layer, (), a, b, returns, target))
            continue
        loop = _loop(body, index, cache)
        if loop is not None:
            found.append(_rebuild(cache, block, index, 3, *loop))
    return found


def _loop(body: Sequence[cst.BaseStatement], index: int, cache: str):
    """``new = []`` / ``for k, v in cache: ...; new.append((a, b))`` / ``return tuple(new)`` (or ``x = ...``)."""
    if index + 2 >= len(body) or not isinstance(body[index + 1], cst.For):
        return None
    start, loop, last = body[index : index + 3]
    empty = m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name())], value=m.List([]) | m.Tuple([]))])
    if not m.matches(start, empty) or loop.orelse is not None or loop.asynchronous is not None:
        return None
    new = start.body[0].targets[0].target.value
    names = pairs_loop(loop.target, loop.iter, cache)
    statements = list(loop.body.body)
    append = m.SimpleStatementLine(
        body=[m.Expr(m.Call(func=m.Attribute(m.Name(new), m.Name("append")), args=[m.Arg(_TWO)]))]
    )
    if names is None or not statements or not m.matches(statements[-1], append):
        return None
    pair = statements[-1].body[0].value.args[0].value
    whole = m.Name(new) | m.Call(func=m.Name("tuple"), args=[m.Arg(m.Name(new))])
    end = _ends(last, lambda value: True if m.matches(value, whole) else None)
    if end is None:
        return None
    returns, target, _ = end
    return (*names, tuple(statements[:-1]), pair.elements[0].value, pair.elements[1].value, returns, target)


def _rebuild(cache, block, index, count, keys, values, layer, body, a, b, returns, target) -> Rebuild:
    names = {keys: "keys", values: "values"}
    blocker = None
    for stmt in body:  # the loop's own statements: `k = torch.cat((k[:, :, :s], k[:, :, -r:]), dim=2)`
        if not m.matches(stmt, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name())])])):
            blocker = blocker or Blocker(stmt, f"`{code_of(stmt).strip()}` is not an assignment of an edited tensor")
            continue
        value, bound = stmt.body[0].value, stmt.body[0].targets[0].target.value
        reads = {n.value for n in findall(value, m.Name())}
        if not reads & (set(names) | {cache}) and bound not in names:
            continue  # a number of the loop's own (`keep = budgets[i] - 1`): copied as it is
        source, why = sequence_edit(value, names)
        blocker = blocker or why
        if source is not None:
            names[bound] = source
    for expr, wanted in ((a, "keys"), (b, "values")):
        source, why = sequence_edit(expr, names)
        blocker = blocker or why
        if blocker is None and source != wanted:
            blocker = Blocker(expr, f"`{code_of(expr)}` puts the layer's {source} where its {wanted} go")
    end = None if body else _rollback_end(a, b, keys, values, {keys, values, layer} - {None})
    return Rebuild(block, index, count, keys, values, layer, tuple(body), a, b, returns, target, end, blocker)


def _rollback_end(a, b, keys: str, values: str, loop_names: set[str]) -> cst.BaseExpression | None:
    """``k[:, :, :end]`` and ``v[:, :, :end]`` with one ``end`` that reads none of the loop's names: that ``end``."""
    ends = []
    for expr, name in ((a, keys), (b, values)):
        if not (isinstance(expr, cst.Subscript) and m.matches(expr.value, m.Name(name))):
            return None
        axis, cut = slice_axis(expr)
        if axis not in SEQUENCE_AXES or cut.lower is not None or cut.step is not None or cut.upper is None:
            return None
        ends.append(cut.upper)
    if code_of(ends[0]) != code_of(ends[1]) or any(findall(ends[0], m.Name(name)) for name in loop_names):
        return None
    return ends[0]


# --------------------------------------------------------------------------------------------------------------
# Which functions consume a past
# --------------------------------------------------------------------------------------------------------------


def _evidence(fn: FunctionInfo, cache: str) -> bool:
    """The function reads ``cache`` as a past: ``cache[i][0|1]``, ``k, v = cache[i]``, or ``for k, v in cache``."""
    if any(layer_read(node, cache) for node in findall(fn.node, m.Subscript())):
        return True
    if any(pair_read(node, cache) is not None for node in findall(fn.node, m.Assign())):
        return True
    loops = [(f.target, f.iter) for f in findall(fn.node, m.For() | m.CompFor())]
    return any(pairs_loop(target, iterable, cache) for target, iterable in loops)


def _passes_to(fn: FunctionInfo, cache: str, targets: set[str]) -> bool:
    """``cache`` is an argument of a call of one of ``targets`` (``rollback(past, n)``)."""
    call = m.Call(func=m.Name(m.MatchIfTrue(lambda name: name in targets)))
    return any(any(m.matches(a.value, m.Name(cache)) for a in node.args) for node in findall(fn.node, call))


def consumers(functions: dict[str, FunctionInfo]) -> tuple[list[str], list[tuple]]:
    """(the module-level functions shown to consume a past, in file order; ``(function, node, why)`` for those whose
    cache parameter is used as a tuple but not shown to be a past). A function shows it by reading the past layer
    by layer, or by handing it to a function that does (to a fixed point). Methods are a model's or a head's, never
    consumers here."""
    candidates = {
        q: fn for q, fn in functions.items() if fn.cls is None and fn.cache_params and fn.legacy()
    }  # module-level functions that use a cache parameter as a tuple
    shown = {q for q, fn in candidates.items() if _evidence(fn, fn.cache_params[0])}
    while True:
        more = {q for q, fn in candidates.items() if q not in shown and _passes_to(fn, fn.cache_params[0], shown)}
        if not more:
            break
        shown |= more
    # a function that only counts the layers (`len(past)`) reads a Cache the same way: nothing to prove or edit, and
    # a file of such functions has nothing to migrate
    counting = {q for q, fn in candidates.items() if all(u.idiom == f"len({u.variable})" for u in fn.legacy())}
    unproven = []
    for qualname, fn in candidates.items():
        if qualname in shown or qualname in counting:
            continue
        cache, first = fn.cache_params[0], fn.legacy()[0]
        unproven.append(
            (
                fn,
                first.node,
                (
                    f"`{cache}` is used as a tuple in {qualname} (`{first.idiom}`), but never as a past: neither read "
                    f"layer by layer as (key, value) pairs (`{cache}[i][0]`) nor iterated as them "
                    f"(`for k, v in {cache}`), nor handed to a function that does, so it is not shown to be a KV "
                    "cache; the file was left unchanged"
                ),
            )
        )
    return [q for q in candidates if q in shown or q in counting], unproven


def unproven_diagnostics(unproven: list, path: str, locate) -> list[Diagnostic]:
    """CM900 at the first tuple use of each function whose cache parameter is not shown to be a past."""
    return [Diagnostic(path, *locate(node), codes.UNKNOWN_IDIOM, why) for _fn, node, why in unproven]
