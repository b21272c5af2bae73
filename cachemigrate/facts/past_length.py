"""A past length read off an axis that is not the sequence: ``past_key_values[0][0].shape[2]`` where the file's own
attention concatenates keys on axis 1 (``[batch, seq, heads, head_dim]``).

Such an original computes with the heads (or the batch, or head_dim) where it means the past length: its cached
path differs from the uncached one unless the two sizes happen to agree, or the value is never used in a way that
matters. ``cache.get_seq_length()`` would return the sequence length and change what the model computes; keeping the
read would leave a tuple use of a Cache. Neither is a migration, so the file is refused at the read, saying which
axis the original reads and which one holds the sequence.
"""

from __future__ import annotations

from typing import Mapping

import libcst as cst
import libcst.matchers as m

from .. import diagnostics as codes
from ..diagnostics import Diagnostic
from ..excerpts import source_line
from ..traverse import findall
from ..views.ranks import int_literal
from .analysis import Locator, ModuleInfo
from .layout import TensorLayout

_NAMES = {"b": "batch", "h": "heads", "s": "sequence", "d": "head_dim", "b*h": "batch x heads"}


def _reads(fn) -> list[tuple[cst.CSTNode, str, int]]:
    """``(node, cache, axis)`` for each ``C[0][0].shape[k]`` / ``C[0][0].size(k)`` of a cache variable C."""
    caches = fn.cache_names or set(fn.cache_params)
    first = m.Subscript(value=m.Subscript(value=m.Name(m.MatchIfTrue(lambda name: name in caches))))
    found = []
    for node in findall(fn.node, m.Subscript(value=m.Attribute(value=first, attr=m.Name("shape")))):
        if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            axis = int_literal(node.slice[0].slice.value)
            if axis is not None:
                found.append((node, node.value.value.value.value.value, axis))
    for node in findall(fn.node, m.Call(func=m.Attribute(value=first, attr=m.Name("size")), args=[m.Arg()])):
        axis = int_literal(node.args[0].value)
        if axis is not None:
            found.append((node, node.func.value.value.value.value, axis))
    return found


_SHAPE_READ = m.Subscript(value=m.Attribute(attr=m.Name("shape"))) | m.Call(func=m.Attribute(attr=m.Name("size")))


def _shape_checks(fn) -> set[cst.CSTNode]:
    """Reads compared with another tensor's size (``past[0][0].shape[0] == input_ids.shape[0]``): a test of which
    layout a past is in (its batch axis), not a length the code computes with."""
    checked = set()
    for comparison in findall(fn.node, m.Comparison()):
        operands = [comparison.left, *(target.comparator for target in comparison.comparisons)]
        shapes = [operand for operand in operands if m.matches(operand, _SHAPE_READ)]
        if len(shapes) >= 2:
            checked.update(shapes)
    return checked


def off_axis_reads(
    info: ModuleInfo, facts: Mapping[str, str], boundary: TensorLayout | None, path: str, locate: Locator
) -> list[Diagnostic]:
    """One CM900 per read of the first layer's keys on an axis that is neither the sequence axis of the keys the
    attention concatenates (``key_seq``) nor that of the tuples the model takes (``boundary_key_seq``);
    ``boundary``: the layout of those keys (nothing is said where its rank is not known)."""
    axes = {int(facts[name]) for name in ("key_seq", "boundary_key_seq") if name in facts}
    rank = boundary.rank if boundary is not None else None
    if not axes or rank is None or "entry_converter" in facts:
        # a model that converts its past on the way in (`_convert_to_rw_cache`) reads either layout, of two ranks
        return []
    labels = boundary.labels()
    result = []
    for fn in info.functions.values():
        checks = _shape_checks(fn)
        for node, cache, axis in _reads(fn):
            if node in checks:
                continue
            negative = axis - rank if axis >= 0 else axis
            if negative in axes or not -rank <= negative < 0:
                continue
            read = f"axis {axis}" + (f" (the {_NAMES.get(labels[negative], labels[negative])})" if labels else "")
            seq = boundary.seq % rank
            line, column = locate(node)
            excerpt = source_line(locate.module.code, line)
            message = (
                f"{fn.qualname} reads the past length off {read} of the first layer's keys "
                f"(`{excerpt}`), but the keys of this file's past are {boundary.describe()}, the sequence on axis "
                f"{seq} (what its attention concatenates on): this is not "
                f"the number of cached positions, and the original computes with it as if it were (its cached "
                "path differs from a run without a cache unless the two sizes agree). cachemigrate will not guess "
                f"which one the code means: `{cache}.get_seq_length()` would change what the model computes; the "
                f"file was left unchanged. Read axis {seq} (check the original against a run without a cache), "
                "then run cachemigrate again"
            )
            result.append(Diagnostic(path, line, column, codes.UNKNOWN_IDIOM, message))
    return result
