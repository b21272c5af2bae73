"""A past read through a swap of two axes: ``past_key, past_value = layer_past[0].transpose(-2, -1),
layer_past[1]`` (folded by the view into the concatenations that read it), then ``torch.cat((past_key, key),
dim=-1)``. The attention concatenates in one layout (keys ``[b, h, d, s]``); the past is stored in another: the
concatenated one with the two axes swapped back (``[b, h, s, d]``). Both are facts of
:mod:`cachemigrate.facts.layout`: the first says how the attention converts around ``cache.update``, the second
what the model takes and gives back as tuples.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..views.expressions import merged_product
from ..views.patterns import compile_statements
from ..views.ranks import int_literal

PAIR_READ = compile_statements("""
    {key_out} = torch.cat(({key_past}, {key}), dim={key_dim})
    {value_out} = torch.cat(({value_past}, {value}), dim={value_dim})
    """)


def swap_of(read: cst.CSTNode | None) -> tuple[int, int] | None:
    """The two axes of ``past[i].transpose(a, b)``; None for the past as stored (``past[i]``) or a merge."""
    if not m.matches(read, m.Call(func=m.Attribute(attr=m.Name("transpose")))):
        return None
    a, b = (int_literal(arg.value) for arg in read.args)
    return a, b


def merge_of(read: cst.CSTNode | None) -> cst.BinaryOperation | None:
    """The ``batch * heads`` of ``past[i].view(batch * heads, ...)`` (or ``reshape``): a view merging the stored
    tensor's two leading axes into one; None for any other read."""
    return merged_product(read)


def reads_through(found: dict, cache: str) -> bool:
    """``key_past``/``value_past`` of :data:`PAIR_READ` are ``cache[0]``/``cache[1]``, one of them at least read
    through a swap of two literal axes (``.transpose(a, b)``) or a view merging the two leading axes
    (``.view(batch * heads, -1, head_dim)``, :func:`merge_of`)."""
    swapped = False
    for index, name in enumerate(("key_past", "value_past")):
        read = found[name]
        past = read.func.value if isinstance(read, cst.Call) and isinstance(read.func, cst.Attribute) else read
        if not (
            m.matches(past, m.Subscript(value=m.Name(cache)))
            and len(past.slice) == 1
            and isinstance(past.slice[0].slice, cst.Index)
            and int_literal(past.slice[0].slice.value) == index
        ):
            return False
        if past is not read:
            swap = (
                m.matches(read.func, m.Attribute(attr=m.Name("transpose")))
                and len(read.args) == 2
                and all(a.keyword is None and not a.star and int_literal(a.value) is not None for a in read.args)
            )
            if not swap and merge_of(read) is None:
                return False
            swapped = True
    return swapped


def swapped_back(rank: int | None, seq: int, merged: bool, swap: tuple[int, int], what: str) -> int:
    """The stored sequence axis (negative) of a past whose ``transpose(*swap)`` is concatenated on ``seq``;
    raises ValueError (said for users) where the code does not show it."""
    a, b = swap
    if rank is not None:
        a, b, seq = a % rank, b % rank, seq % rank
    elif a >= 0 or b >= 0:
        raise ValueError(
            f"the past {what} is read through `.transpose({a}, {b})`, and the rank of the {what} is not known, so "
            "the axis the past keeps the sequence on cannot be told"
        )
    if merged and (rank is None or 0 in (a, b)):
        raise ValueError(f"the past {what} merges batch and heads and is read through `.transpose({a}, {b})`")
    seq = b if seq == a else a if seq == b else seq
    return seq - rank if rank is not None else seq
