"""The legacy layout of the cached keys and values: a fact the engine reads off each attention's own code.

What an attention's concatenations say, for the key and for the value tensor:

* the **form**: a ``(key, value)`` pair (``torch.cat((past[0], k), dim)`` and ``torch.cat((past[1], v), dim)``),
  or one **fused** tensor holding both (``torch.cat((past, kv), dim)``, split into key and value after);
* the **sequence axis**: the ``dim`` of the concatenation, negative (normalised with the rank where the code
  says it, :mod:`cachemigrate.views.ranks`);
* **merged batch x heads**: the new tensor was built by ``x.reshape(batch * heads, ...)`` (or ``view``), so its
  first axis holds both; the heads factor is the one that is not read off a tensor shape (``self.num_heads``,
  ``num_kv_heads``), and the batch is taken to be the outer one (what a reshape of ``[batch, heads, ...]`` gives).

A layout is *standard* when a Cache can hold the tensors as they are (sequence on axis -2, batch alone on axis 0):
``DynamicCache`` concatenates on -2 and reorders beams on axis 0. Any other known layout is *converted* around
``cache.update`` with views (:mod:`cachemigrate.facts.conversions`). What the code does not show is no layout: the
reason is kept, and no rule that needs the layout applies.

Assumed, not proven: the batch is the first axis that is not the sequence (the outer factor of a merged axis).
Forward passes do not depend on it (the conversions are exact inverses); a Cache's beam reorder does, which the
probe's beam-search check covers.
"""

from __future__ import annotations

import contextlib
from typing import Iterable

import libcst as cst
import libcst.matchers as m

from .constructs import between_others
from .helper_layout import helper_layout
from .layout_types import Layout, TensorLayout, Unknown  # noqa: F401 (re-exported)
from .merged_reads import merged_read
from .past_reads import PAIR_READ, merge_of, reads_through, swap_of, swapped_back
from ..views.patterns import code_of, compile_statements, match_statements
from ..views.ranks import RankScope, int_literal, iter_small_statements
from ..traverse import findall

_PAIR = compile_statements("""
    {key_out} = torch.cat(({cache}[0], {key}), dim={key_dim})
    {value_out} = torch.cat(({cache}[1], {value}), dim={value_dim})
    """)
# A flash kernel's layout: the stored past [b, h, s, d] is transposed to [b, s, h, d] for the concatenation (dim 1),
# and transposed back when it is stored; the cache itself keeps the standard layout (Bark, BART's flash classes).
_PAIR_KERNEL = compile_statements("""
    {key_out} = torch.cat(({cache}[0].transpose(1, 2), {key}), dim={key_dim})
    {value_out} = torch.cat(({cache}[1].transpose(1, 2), {value}), dim={value_dim})
    """)
_PAIR_KERNEL_NAMED = compile_statements("""
    {past_key} = {cache}[0].transpose(1, 2)
    {past_value} = {cache}[1].transpose(1, 2)
    {key_out} = torch.cat(({past_key}, {key}), dim={key_dim})
    {value_out} = torch.cat(({past_value}, {value}), dim={value_dim})
    """)
_FUSED = compile_statements("{out} = torch.cat(({cache}, {new}), dim={dim})")
_SPLIT = compile_statements("{key}, {value} = {fused}.split(({size}, {size}), dim=-1)")

KEEPS_LAYOUT = frozenset({"contiguous", "to", "float", "half", "bfloat16", "double", "type", "type_as", "clone"})
KEEPS_LAYOUT |= frozenset({"detach"})


# --------------------------------------------------------------------------------------------------------------
# The concatenations of one attention
# --------------------------------------------------------------------------------------------------------------


def attention_layout(function: cst.FunctionDef, views, cache: str, scope_factory) -> Layout:
    """The layout one attention's ``forward`` concatenates its past onto; raises :class:`Unknown`."""
    bound = {"cache": cache}
    pairs, fused, kernel = [], [], []
    for block in findall(function, m.IndentedBlock()):
        viewed = views.block(block)
        statements = [v.node for v in viewed]
        for index in range(len(statements)):
            found = match_statements(_PAIR, statements, index, bound)
            if found is not None:
                last = block.body[viewed[index].start + viewed[index].count - 1]  # the concatenation, after an unpack
                pairs.append((found, block.body[viewed[index].start], last))
                continue
            found = match_statements(_PAIR_KERNEL, statements, index, bound) or match_statements(
                _PAIR_KERNEL_NAMED, statements, index, bound
            )
            if found is not None and {int_literal(found["key_dim"]), int_literal(found["value_dim"])} <= {1, -3}:
                kernel.append(found)
                continue
            found = match_statements(PAIR_READ, statements, index, {})
            if found is not None and reads_through(found, cache):
                last = block.body[viewed[index].start + viewed[index].count - 1]
                pairs.append((found, block.body[viewed[index].start], last))
                continue
            found = match_statements(_FUSED, statements, index, bound)
            if found is not None:
                fused.append((found, block.body[viewed[index].start], block))
    if kernel and not fused:  # the stored past is [b, h, s, d], as the cache keeps it
        standard = TensorLayout(4, -2)
        layouts_seen = {Layout("pair", standard, standard)}
    else:
        layouts_seen = set()
    if not (pairs or fused or kernel):  # the past handed to a projection helper nested in the attention
        helper = helper_layout(function, cache)
        if helper is not None:
            return helper
    if not (pairs or fused or kernel) and not between_others(function, {cache}):  # that one is said at its line
        concatenations = _concatenations_of(function, cache)
        inputs = _inputs_cached(function, concatenations)
        if inputs:
            call, name = inputs
            raise Unknown(
                f"the attention concatenates its past with its own input `{name}` (`{code_of(call)}`): the layer's "
                "past holds the states the layer was given, from which it projects keys and values again at every "
                "step, not keys and values; a Cache holds keys and values, so this past cannot become one without "
                "changing what the layer caches (migrate it by hand, caching the projected keys and values, or keep "
                "this model on tuples)",
                node=call,
            )
        if concatenations:
            shown = "; ".join(f"`{code_of(c)}`" for c in concatenations[:2])
            raise Unknown(
                f"the attention concatenates its past ({shown}), but not as a layer's stored tensors: only "
                "`torch.cat((past[0], key), dim)` with `torch.cat((past[1], value), dim)` (the past as stored, or read "
                "through a swap of two axes, `past[i].transpose(a, b)`), or `torch.cat((past, key_value), dim)` for "
                "fused keys and values, have a known layout",
                node=concatenations[0],
            )
    if pairs and fused or not (pairs or fused or kernel):
        what = "both a (key, value) pair and a fused tensor" if pairs else "neither"
        raise Unknown(
            f"the attention concatenates {what} of past keys and values (`torch.cat((past[0], key), dim)` and "
            "`torch.cat((past[1], value), dim)`, or `torch.cat((past, key_value), dim)`)",
            explained=not pairs and bool(between_others(function, {cache})),  # the past between other tensors
        )
    layouts = layouts_seen
    for found, stmt, last in pairs:
        tracker = _Tracker(function, stmt, scope_factory())
        with _at(last):
            if any(merge_of(found.get(read)) is not None for read in ("key_past", "value_past")):
                layouts.add(merged_read(function, found, tracker, cache, _UNSURE))
                continue
            key = _tensor(found["key"], found["key_dim"], tracker, "key")
            value = _tensor(found["value"], found["value_dim"], tracker, "value")
            swaps = [swap_of(found.get(read)) for read in ("key_past", "value_past")]
            stored = None
            if any(swaps):
                stored = Layout("pair", _through(key, swaps[0], "key"), _through(value, swaps[1], "value"))
        layouts.add(Layout("pair", key, value, stored=stored))
    for found, stmt, block in fused:
        tracker = _Tracker(function, stmt, scope_factory())
        with _at(stmt):
            tensor = _tensor(found["new"], found["dim"], tracker, "key and value")
            if tensor.heads is not None or tensor.seq != -2:
                raise Unknown(f"the fused keys and values are {tensor.describe()}; only a sequence axis -2 is known")
            if not _split_after(function, views, code_of(found["out"])):
                raise Unknown(
                    f"`{code_of(found['out'])}` holds keys and values fused, but is never split into two equal "
                    "halves on its last axis (`key, value = key_value.split((head_dim, head_dim), dim=-1)`)"
                )
        layouts.add(Layout("fused", tensor, tensor))
    if len(layouts) != 1:
        raise Unknown("the attention concatenates its past in more than one layout")
    return layouts.pop()


def _through(tensor: TensorLayout, swap: tuple[int, int] | None, what: str) -> TensorLayout:
    """The layout of the stored past whose ``transpose(a, b)`` is concatenated in ``tensor``'s layout."""
    if swap is None:
        return tensor
    try:
        seq = swapped_back(tensor.rank, tensor.seq, tensor.heads is not None, swap, what)
    except ValueError as exc:
        raise Unknown(str(exc)) from None
    return TensorLayout(tensor.rank, seq, tensor.heads)


@contextlib.contextmanager
def _at(stmt: cst.CSTNode):
    """An :class:`Unknown` raised inside is located at ``stmt`` (the concatenation), unless it names its own node."""
    try:
        yield
    except Unknown as exc:
        if exc.node is None:
            exc.node = stmt
        raise


def _concatenations_of(function: cst.FunctionDef, cache: str) -> list[cst.Call]:
    """The ``torch.cat`` calls of the function that read the past: the cache itself, or a local assigned (in code
    order) from an expression that reads it (``past_key = layer_past[0].transpose(-2, -1)``)."""
    derived = {cache}

    def reads(node: cst.CSTNode) -> bool:
        return any(n.value in derived for n in findall(node, m.Name()))

    for small in iter_small_statements(function.body):
        if isinstance(small, cst.Assign) and reads(small.value):
            for target in small.targets:
                derived.update(n.value for n in findall(target.target, m.Name()))
    cat = m.Call(
        func=m.Attribute(value=m.Name("torch"), attr=m.Name("cat") | m.Name("concat") | m.Name("concatenate"))
    )
    return [call for call in findall(function, cat) if call.args and reads(call.args[0].value)]


def reads_stored_only(function: cst.FunctionDef, cache: str) -> bool:
    """The attention never concatenates its past and reads it only as stored, each element whole into a name
    (``key = past[0]``, ``value = past[1]``): a cross-attention that reuses the keys it wrote once. Its code shows
    no layout; it keeps whatever it stores."""
    if _concatenations_of(function, cache):
        return False
    element = m.Subscript(value=m.Name(cache))
    whole = m.Assign(targets=[m.AssignTarget(m.Name())], value=element)
    reads = findall(function, element)
    kept = {id(a.value) for a in findall(function, whole) if int_literal(a.value.slice[0].slice.value) in (0, 1)}
    return bool(reads) and all(id(r) in kept for r in reads)


def _inputs_cached(function: cst.FunctionDef, concatenations: list[cst.Call]) -> tuple[cst.Call, str] | None:
    """(the call, the parameter) of a concatenation of the past with a parameter of the function as it came in
    (4.6's GPT-Neo local attention: ``torch.cat([past, hidden_states], dim=1)``): the past holds inputs, not keys
    and values."""
    params = function.params
    names = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
    rebound = {n.value for a in findall(function, m.AssignTarget()) for n in findall(a.target, m.Name())}
    for call in concatenations:
        value = call.args[0].value
        if not isinstance(value, (cst.List, cst.Tuple)):
            continue
        for element in value.elements[1:]:
            if isinstance(element.value, cst.Name) and element.value.value in names - rebound:
                return call, element.value.value
    return None


def _split_after(function: cst.FunctionDef, views, fused: str) -> bool:
    for block in findall(function, m.IndentedBlock()):
        statements = [v.node for v in views.block(block)]
        for index in range(len(statements)):
            if match_statements(_SPLIT, statements, index, {"fused": fused}) is not None:
                return True
    return False


def _tensor(new: cst.CSTNode, dim: cst.CSTNode, tracker: "_Tracker", what: str) -> TensorLayout:
    axis = int_literal(dim)
    rank = tracker.scope.rank(new) if isinstance(new, cst.BaseExpression) else None
    if axis is None:
        raise Unknown(f"the {what} concatenation's `dim={code_of(dim)}` is not a number")
    if axis >= 0:
        if rank is None:
            raise Unknown(
                f"the rank of `{code_of(new)}` is not known, so `dim={axis}` of its concatenation cannot be told "
                "from a negative axis"
            )
        axis -= rank
    if rank is None and axis not in (-1, -2):
        # where the axes other than the sequence go depends on the rank (the conversion would be refused later,
        # at no line): said here, at the concatenation
        raise Unknown(
            f"the rank of `{code_of(new)}` is not known, so its sequence axis {axis} cannot be moved to -2, where a "
            "Cache keeps it (a `.view`/`.reshape` with one size per axis, or a `permute`, would show it)"
        )
    heads = tracker.heads_of(new)
    if heads is _UNSURE:
        if rank == 3:
            raise Unknown(
                f"`{code_of(new)}` has 3 axes but is not built by a `reshape`/`view` the code shows, so whether its "
                "first axis is the batch or batch x heads cannot be told"
            )
        # 4 axes (or a rank the code does not show, the case of every [batch, heads, seq, head_dim] layout whose
        # heads are split in a helper): a merged batch x heads axis would leave 3
        heads = None
    return TensorLayout(rank, axis, heads)


# --------------------------------------------------------------------------------------------------------------
# What built the concatenated tensors: ranks, and batch x heads merged by a reshape
# --------------------------------------------------------------------------------------------------------------

_UNSURE = object()


class _Tracker:
    """Ranks and merges of the function's local tensors in code order, up to the statement ``stop``."""

    def __init__(self, function: cst.FunctionDef, stop: cst.CSTNode, scope: RankScope) -> None:
        self.function = function
        self.scope = scope
        self.merges: dict[str, object] = {}  # name -> heads code | None (not merged) | _UNSURE
        self.shape_names: set[str] = set()  # names read off a tensor's shape
        self.assigned: dict[str, int] = {}
        for target in findall(function, m.AssignTarget() | m.AugAssign() | m.For()):
            for name in findall(target.target, m.Name()):
                self.assigned[name.value] = self.assigned.get(name.value, 0) + 1
        stops = set(_small(stop))
        for small in iter_small_statements(function.body):
            if small in stops:
                break
            self._statement(small)

    def heads_of(self, node: cst.CSTNode):
        if isinstance(node, cst.Name):
            return self.merges.get(node.value, _UNSURE)
        return self._merge_of(node)

    # -- statements ------------------------------------------------------------------------------------------

    def _statement(self, small: cst.BaseSmallStatement) -> None:
        if isinstance(small, cst.Assign):
            for target in small.targets:
                self._assign(target.target, small.value)
        self.scope.statement(small)

    def _assign(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if isinstance(target, cst.Name):
            if _reads_shape(value):
                self.shape_names.add(target.value)
            self.merges[target.value] = self._merge_of(value)
            return
        if not isinstance(target, (cst.Tuple, cst.List)):
            return
        names = [e.value.value if isinstance(e.value, cst.Name) else None for e in target.elements]
        if _reads_shape(value):
            self.shape_names.update(n for n in names if n)
        passed = set()
        if isinstance(value, cst.Call):
            passed = {a.value.value for a in value.args if isinstance(a.value, cst.Name)}
        elif isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(names):
            for name, element in zip(names, value.elements):
                if name:
                    self.merges[name] = self._merge_of(element.value)
            return
        for name in names:
            if name and name not in passed:  # `q, k = rotary(q, k, ...)` keeps what q and k were
                self.merges[name] = _UNSURE

    # -- expressions -----------------------------------------------------------------------------------------

    def _merge_of(self, value: cst.BaseExpression):
        if isinstance(value, cst.Name):
            return self.merges.get(value.value, _UNSURE)
        if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)):
            return _UNSURE
        method = value.func.attr.value
        args = [a for a in value.args if a.keyword is None]
        if method in ("reshape", "view") and len(args) >= 2 and not any(a.star for a in args):
            first = args[0].value
            if m.matches(first, m.BinaryOperation(operator=m.Multiply())):
                return self._heads(first)
            return None
        if method in KEEPS_LAYOUT:
            return self._merge_of(value.func.value)
        return _UNSURE

    def _heads(self, product: cst.BinaryOperation):
        """The heads factor of ``batch * heads``: the one that reads no tensor shape; the other must."""
        left, right = product.left, product.right
        shaped = [self._from_shape(side) for side in (left, right)]
        if shaped == [True, False] and self._stable(right):
            return code_of(right)
        if shaped == [False, True] and self._stable(left):
            return code_of(left)
        return _UNSURE

    def _from_shape(self, node: cst.CSTNode) -> bool:
        return _reads_shape(node) or any(n.value in self.shape_names for n in findall(node, m.Name()))

    def _stable(self, node: cst.CSTNode) -> bool:
        """Every local the expression reads is assigned once in the function (so it is the same at the
        concatenation as where the tensor was reshaped); ``self.x`` is never assigned in it."""
        for name in _local_names(node):
            if self.assigned.get(name, 0) > 1:
                return False
        attributes = {code_of(a) for a in findall(node, m.Attribute(value=m.Name("self")))}
        for target in findall(self.function, m.AssignTarget(m.Attribute(value=m.Name("self")))):
            if code_of(target.target) in attributes:
                return False
        return True


def _small(stmt: cst.CSTNode) -> Iterable[cst.CSTNode]:
    if isinstance(stmt, cst.SimpleStatementLine):
        return stmt.body
    return list(iter_small_statements(cst.IndentedBlock(body=[stmt])))


def _reads_shape(node: cst.CSTNode) -> bool:
    shape = m.Attribute(attr=m.Name("shape")) | m.Call(func=m.Attribute(attr=m.Name("size")))
    return bool(findall(node, shape))


def _local_names(node: cst.CSTNode) -> set[str]:
    attributes = {a.attr for a in findall(node, m.Attribute())}  # `.x` of `self.x` is no variable
    return {n.value for n in findall(node, m.Name()) if n not in attributes} - {"self"}
