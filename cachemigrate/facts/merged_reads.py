"""A past read through a view that merges its two leading axes: ``prev_key = past[0].view(batch * heads, -1,
head_dim)`` (folded by the view into the concatenation that reads it, :mod:`cachemigrate.views.normalize`), then
``torch.cat((prev_key, key), dim=1)`` (4.6's ProphetNet n-gram attention). The attention concatenates
``[b*h, s, d]``; what the layer stores is shown where it stores the result back, split again:
``past = (key.view(batch, heads, -1, head_dim), ...)``, ``[b, h, s, d]``. Both are facts of
:mod:`cachemigrate.facts.layout`: the first says how the attention converts around ``cache.update`` (``unflatten``
in, ``flatten`` out), the second what the model takes and gives back as tuples. A merge keeps the axes after it, so
the sequence axis, counted from the end, is the same in both."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..traverse import findall
from ..views.patterns import code_of
from ..views.ranks import int_literal
from .layout_types import Layout, TensorLayout, Unknown
from .past_reads import merge_of


def merged_read(function: cst.FunctionDef, found: dict, tracker, cache: str, unsure: object) -> Layout:
    """The layout of a past read through a view merging its two leading axes (``past[0].view(batch * heads, -1,
    head_dim)``, concatenated on the sequence axis of the view) and stored back split again (``past = (key.view(
    batch, heads, -1, head_dim), value.view(...))``): the attention concatenates ``[b*h, s, d]``; the layer keeps
    ``[b, h, s, d]``, the merge's factors split again, its other axes as they were (so the sequence axis, counted
    from the end, is the same). ``tracker``: the layout module's ranks and merges up to the concatenation;
    ``unsure``: what it says for a merge it cannot tell. Raises :class:`Unknown`, saying what the code lacks."""
    tensors, stores = [], _stored_back(function, cache)
    for what, index in (("key", 0), ("value", 1)):
        read, out = found[f"{what}_past"], code_of(found[f"{what}_out"])
        product = merge_of(read)
        if product is None:
            raise Unknown(f"the past {what} is not read through the view that merges batch and heads as the other is")
        shown = f"`{code_of(read)}`"
        heads = tracker._heads(product)
        if heads is unsure:
            raise Unknown(
                f"the past {what} is read through {shown}, and which factor of `{code_of(product)}` is the heads "
                "cannot be told (the batch must be read off a tensor's shape, the heads not)"
            )
        rank = len(read.args)
        axis = int_literal(found[f"{what}_dim"])
        if axis is None:
            raise Unknown(f"the {what} concatenation's `dim={code_of(found[f'{what}_dim'])}` is not a number")
        seq = axis - rank if axis >= 0 else axis
        if seq % rank == 0:
            raise Unknown(f"the past {what} is read through {shown} and concatenated on the merged axis")
        new_heads = tracker.heads_of(found[what])
        if new_heads is not unsure and new_heads != heads:
            raise Unknown(f"the new {what} does not merge batch and heads as the past read through {shown} does")
        batch = code_of(product.left if code_of(product.right) == heads else product.right)
        split = stores.get(out)
        rest = [code_of(a.value) for a in read.args[1:]]
        if split is None or [code_of(a.value) for a in split.args] != [batch, heads, *rest]:
            written = f"`{code_of(split)}`" if split is not None else "nothing"
            raise Unknown(
                f"the past {what} is read through {shown}, merging batch and heads, but the layer stores `{out}` back "
                f"as {written}, not split again (`{out}.view({batch}, {heads}, {', '.join(rest)})`), so the layout "
                "it keeps the past in is not shown"
            )
        tensors.append(TensorLayout(rank, seq, heads))
    key, value = tensors
    return Layout("pair", key, value, stored=Layout("pair", key.unmerged(), value.unmerged()))


def _stored_back(function: cst.FunctionDef, cache: str) -> dict[str, cst.Call]:
    """``cache = (a.view(...), b.view(...))``: {"a": the view of a, "b": ...} (``reshape`` too)."""
    split = m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("view") | m.Name("reshape")))
    stores: dict[str, cst.Call] = {}
    for assign in findall(function, m.Assign(targets=[m.AssignTarget(m.Name(cache))], value=m.Tuple())):
        for element in assign.value.elements:
            if m.matches(element.value, split) and all(a.keyword is None and not a.star for a in element.value.args):
                stores.setdefault(element.value.func.value.value, element.value)
    return stores
