"""The views that move a legacy layout to what a Cache holds and back: code, for the templates' hole filters.

A Cache holds tensors with the batch alone on axis 0 and the sequence on axis -2 (``DynamicCache`` concatenates
on -2, reorders beams on 0). To get there from a layout (:class:`cachemigrate.facts.layout.TensorLayout`):

* a merged ``batch * heads`` first axis is unflattened: ``x.unflatten(0, (-1, heads))``;
* the sequence axis moves to -2, the other axes keeping their order: ``x.transpose(-1, -2)`` for keys stored
  ``[..., head_dim, seq]``, ``x.permute(1, 2, 0, 3)`` for ``[seq, batch, heads, head_dim]``...

and back, the inverse, then ``.contiguous()`` where axes moved: the legacy code got its tensor straight from
``torch.cat``, which is contiguous, and kernels may take another path (and round differently) on a strided view.
Every step is a view of the same values (or a copy in the legacy memory order), so the model computes exactly
what it computed before.

Templates use them as filters: ``{key|key_to_cache}``, ``{key_out|key_from_cache}`` in the attention;
``{cache|legacy_to_cache}`` and ``{presents|cache_to_legacy}`` in the base model (the latter reads
``presents.to_legacy_cache()`` and gives the file's own legacy layout, and container: a list where the model
accumulated a list). ``{presents|layers_to_legacy}`` gives the same tuples read off ``presents.layers``
(``layer.keys``, ``layer.values``), for runtimes without ``to_legacy_cache`` (5.x); ``legacy_to_cache`` writes no
API at all (``DynamicCache(tuple)`` or ``from_legacy_cache`` around it is the rule's), so every era can use it.
"""

from __future__ import annotations

from typing import Callable

import libcst as cst

from .layout import TensorLayout

ATTENTION_FILTERS = ("key_to_cache", "value_to_cache", "key_from_cache", "value_from_cache")
MODEL_FILTERS = ("legacy_to_cache", "cache_to_legacy", "layers_to_legacy")
FILTERS = frozenset(ATTENTION_FILTERS + MODEL_FILTERS)
# API names the code a filter writes may use (for the check that a rule writes nothing an era's runtime lacks)
FILTER_WRITES = {"cache_to_legacy": ("to_legacy_cache",)}


class Unconvertible(Exception):
    """A layout whose views to the Cache's layout cannot be written (said for users)."""


def _permutation(layout: TensorLayout, rank: int | None) -> list[int] | None:
    """The permutation that puts the sequence axis at -2, the others in their order; None when it is the
    identity. Raises :class:`Unconvertible` when it depends on a rank the code does not show."""
    if layout.seq == -2:
        return None
    if rank is None:
        if layout.seq == -1:
            return [-1]  # marker: swap the last two axes, whatever the rank
        raise Unconvertible(
            f"moving sequence axis {layout.seq} to -2 needs the rank of the tensor, which is not known"
        )
    axis = layout.seq % rank
    others = [i for i in range(rank) if i != axis]
    return others[: rank - 2] + [axis] + others[rank - 2 :]


def _move(code: str, order: list[int], rank: int | None) -> str:
    if order == [-1]:
        return f"{code}.transpose(-1, -2)"
    moved = [i for i, axis in enumerate(order) if axis != i]
    if len(moved) == 2:
        first, second = moved
        if second == rank - 1 and first == rank - 2:
            return f"{code}.transpose(-1, -2)"
        return f"{code}.transpose({first}, {second})"
    return f"{code}.permute({', '.join(map(str, order))})"


def _inverse(order: list[int]) -> list[int]:
    if order == [-1]:
        return order
    inverse = [0] * len(order)
    for position, axis in enumerate(order):
        inverse[axis] = position
    return inverse


def to_cache(code: str, layout: TensorLayout, heads: str | None) -> str:
    """Code of ``code`` (a tensor in ``layout``) viewed in the Cache's layout; ``heads`` is the heads factor as
    code valid where the conversion goes (the attention's own, or the model's)."""
    rank = layout.rank
    if layout.heads is not None:
        if heads is None:
            raise Unconvertible("the number of heads merged into the first axis is not known here")
        code = f"{code}.unflatten(0, (-1, {heads}))"
        rank = rank + 1 if rank is not None else None
    order = _permutation(layout, rank)
    return _move(code, order, rank) if order else code


def from_cache(code: str, layout: TensorLayout) -> str:
    """Code of ``code`` (a tensor in the Cache's layout) back in ``layout``, with the memory order of a
    ``torch.cat`` result."""
    rank = layout.rank + 1 if layout.heads is not None and layout.rank is not None else layout.rank
    order = _permutation(layout, rank)
    if order:
        code = _move(code, _inverse(order), rank)
    if layout.heads is not None:
        code = f"{code}.flatten(0, 1)"
    return f"{code}.contiguous()" if order else code


def _expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def _filter(make: Callable[[str], str]) -> Callable[[cst.BaseExpression], cst.BaseExpression]:
    """A filter: the captured (or bound) expression in, its conversion out; the identity gives the node back."""

    def apply(node: cst.BaseExpression) -> cst.BaseExpression:
        code = cst.Module(body=[]).code_for_node(node)
        converted = make(code)
        return node if converted == code else _expression(converted)

    return apply


def attention_filters(key: TensorLayout, value: TensorLayout) -> dict[str, Callable]:
    """The four per-tensor filters of an attention whose concatenations are in ``key``/``value`` layouts."""
    return {
        "key_to_cache": _filter(lambda c: to_cache(c, key, key.heads)),
        "value_to_cache": _filter(lambda c: to_cache(c, value, value.heads)),
        "key_from_cache": _filter(lambda c: from_cache(c, key)),
        "value_from_cache": _filter(lambda c: from_cache(c, value)),
    }


def model_filters(form: str, key: TensorLayout, value: TensorLayout, heads: str | None, container: str):
    """``legacy_to_cache`` / ``cache_to_legacy`` for the base model, whose tuples are in the boundary layout;
    ``heads`` is the model's code for a merged heads factor, ``container`` "tuple" or "list"."""
    if form == "fused":

        def legacy_to_cache(c: str) -> str:
            return f"tuple(layer.chunk(2, dim=-1) for layer in {c})"

        def cache_to_legacy(c: str) -> str:
            return _container(f"torch.cat(layer, dim=-1) for layer in {c}.to_legacy_cache()", container)

        def layers_to_legacy(c: str) -> str:
            return _container(f"torch.cat((layer.keys, layer.values), dim=-1) for layer in {c}.layers", container)

    else:
        key_in, value_in = to_cache("key", key, heads), to_cache("value", value, heads)
        key_out, value_out = from_cache("key", key), from_cache("value", value)
        same = (key_in, value_in, key_out, value_out) == ("key", "value", "key", "value")

        def legacy_to_cache(c: str) -> str:
            return c if same else f"tuple(({key_in}, {value_in}) for key, value in {c})"

        def cache_to_legacy(c: str) -> str:
            if same and container == "tuple":
                return f"{c}.to_legacy_cache()"
            return _container(f"({key_out}, {value_out}) for key, value in {c}.to_legacy_cache()", container)

        def layers_to_legacy(c: str) -> str:
            keys, values = from_cache("layer.keys", key), from_cache("layer.values", value)
            return _container(f"({keys}, {values}) for layer in {c}.layers", container)

    return {
        "legacy_to_cache": _filter(legacy_to_cache),
        "cache_to_legacy": _filter(cache_to_legacy),
        "layers_to_legacy": _filter(layers_to_legacy),
    }


def _container(generator: str, container: str) -> str:
    return f"[{generator}]" if container == "list" else f"tuple({generator})"
