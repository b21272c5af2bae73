"""Why a legacy use left after the rules ran cannot be migrated, for the constructs whose reason is known: said
once per construct, in the user's terms, instead of the generic "no rule rewrites this idiom".

* the past concatenated between other tensors (GIT: fresh image keys, then the past, then the new text keys);
* a local that holds the past handed in or a past the function builds itself as tuples (GPTSAN's ``spout``);
* a loop over the past itself, layer by layer (``for layer, past in enumerate(past_key_values)``);
* the past length (``past[0].shape[2]``) read after the past was concatenated onto the step's keys.
* the past picked by a loop's index (``kv_caches[index]``) where the loop does not show that the index is the
  position of the layer it runs (:mod:`cachemigrate.facts.layer_loops`).
"""

from __future__ import annotations

import re

import libcst as cst
import libcst.matchers as m

from .layer_loops import layer_indices
from ..views.expressions import CONCATENATE
from ..views.patterns import code_of
from ..traverse import findall

# a use that walks the past layer by layer: `for past in C`, `enumerate(C)`, `zip(layers, C)`...
ITERATES = re.compile(r"^(for .+ in |(enumerate|zip|iter|reversed|map)\()")


def between_others(function: cst.FunctionDef | None, caches: set[str]) -> set[cst.CSTNode]:
    """The ``C[i]`` nodes of ``function`` (and their ``C``: a use is located at either) that a ``torch.cat`` has
    after another tensor, for C one of ``caches``."""
    if function is None:
        return set()
    found = set()
    concatenate = m.Call(
        func=m.Attribute(value=m.Name("torch"), attr=m.Name()), args=[m.Arg(m.List() | m.Tuple()), m.ZeroOrMore()]
    )
    for call in findall(function, concatenate):
        if call.func.attr.value not in CONCATENATE:
            continue
        for element in call.args[0].value.elements[1:]:
            value = element.value
            if isinstance(value, cst.Subscript) and m.matches(value.value, m.Name()) and value.value.value in caches:
                found.update((value, value.value))
    return found


def construct_key(fn, use, node, middle: set[cst.CSTNode]) -> str:
    """What groups uses into one diagnostic: the statement, or the construct several statements share."""
    if node is not None and node in middle:
        return "between others"
    return use.statement


def explain(fn, use, node, middle: set[cst.CSTNode], where: str, idioms: list[str], locate, info=None) -> str | None:
    """The message for a construct whose reason is known, or None (``info``: the file's facts, where known)."""
    function = use.function
    if node is not None and node in middle:
        return (
            f"{function} concatenates the past between other tensors ({idioms[0]}{where}): a Cache's `update()` "
            "appends new keys and values after those it holds, and what this code puts before the past is not in "
            "the cache; no rule migrates this attention, so the file was left unchanged. Migrate it by hand: update "
            "the cache with the part after the past, then concatenate the part before it with what `update()` "
            "returns"
        )
    built = _built_here(fn, use)
    if built is not None:
        assign, built_code = built
        return (
            f"`{use.variable}` in {function} is the past it is handed or one it builds itself as tuples "
            f"(`{built_code}`, line {locate(assign)[0]}): no rule turns a past built by the model into a Cache; the "
            "file was left unchanged. Build a Cache from it by hand (`DynamicCache.from_legacy_cache(...)`) or keep "
            "this model on tuples"
        )
    after = _length_after_concatenation(fn, use, node, locate)
    if after is not None:
        return (
            f"{function} reads the past length ({idioms[0]}{where}) after it concatenated the past onto this "
            f"step's keys (`{code_of(after)}`, line {locate(after)[0]}): with a Cache, `update()` has added this "
            "step's keys by then, so the cache's length there is not the past length, and no rule moves the read "
            "above the update; the file was left unchanged. Migrate it by hand: read "
            "`cache.get_seq_length(self.layer_idx)` before the update and use that value here"
        )
    index = _loop_index_of(fn, node)
    if use.kind == "legacy" and index is not None and not _is_layer_position(fn, index, info):
        return (
            f"{function} picks a layer's past by its loop's index (`{quote_idiom(use.idiom)}`{where}), but the loop "
            f"does not show that `{index}` is the position of the layer it runs: `for {index}, layer in "
            f"enumerate(self.layers)`, or a `for {index} in range(...)` loop taking `self.layers[{index}]` (directly "
            f"or through a method that only returns it), with `{index}` bound by that loop alone. A Cache is updated "
            "by each attention at its own position in the layer list, so the past picked here becomes the whole "
            "cache only where the two agree, and cachemigrate will not guess; the file was left unchanged. Take the "
            f"layer as `self.layers[{index}]` in the loop, then run cachemigrate again"
        )
    if use.kind == "legacy" and ITERATES.match(use.idiom):
        return (
            f"{function} iterates `{use.variable}` layer by layer ({', '.join(idioms)}{where}): a Cache is one "
            "object that every layer updates, not a sequence of per-layer pasts, and no rule rewrites a loop over "
            "the past; the file was left unchanged. Loop over the layers instead and hand each the whole cache"
        )
    return None


def quote_idiom(idiom: str) -> str:
    return idiom.replace("`", "'")


def _loop_index_of(fn, node) -> str | None:
    """The name ``i`` when ``node`` is the ``C`` of a ``C[i]`` inside a ``for`` loop that binds ``i``."""
    if fn is None or node is None:
        return None
    for loop in findall(fn.node, m.For()):
        bound = {n.value for n in findall(loop.target, m.Name())}
        for subscript in findall(loop.body, m.Subscript()):
            if subscript.value is node and len(subscript.slice) == 1:
                part = subscript.slice[0].slice
                if isinstance(part, cst.Index) and isinstance(part.value, cst.Name) and part.value.value in bound:
                    return part.value.value
    return None


def _is_layer_position(fn, index: str, info) -> bool:
    """``index`` is the position of the layer its loop runs over one of the class's layer lists (then what blocks
    is around ``C[index]``, not the index)."""
    cls = info.classes.get(fn.cls) if info is not None and fn.cls else None
    if cls is None:
        return False
    return any(index in layer_indices(fn, cls, f"self.{attr}") for attr in cls.module_lists)


def _built_here(fn, use) -> tuple[cst.CSTNode, str] | None:
    """When ``use`` is part of building ``use.variable`` (a statement assigning it), a local that holds the past
    handed in (an alias) but is also assigned a value made from no cache and no placeholder of Nones (GPTSAN's
    past made from ``spout``): the first such assignment and its code."""
    if fn is None or use.variable in fn.cache_params:
        return None
    if not re.match(rf"{re.escape(use.variable)}\s*=[^=]", use.statement):
        return None
    caches = fn.cache_names or set(fn.cache_params)
    for assign in findall(fn.node, m.Assign(targets=[m.AssignTarget(m.Name(use.variable))])):
        names = {n.value for n in findall(assign.value, m.Name())}
        if not names & caches and "None" not in names:
            return assign, f"{use.variable} = {code_of(assign.value)}"
    return None


def _length_after_concatenation(fn, use, node, locate) -> cst.CSTNode | None:
    """The ``torch.cat`` of ``C[0]`` that comes before ``use`` in ``fn``, where ``use`` reads the past length off
    the past keys (``C[0].shape[k]``, ``C[0].size(k)``)."""
    if fn is None or node is None or not re.match(rf"^{re.escape(use.variable)}\[0\]$", use.idiom):
        return None
    if not re.search(rf"{re.escape(use.variable)}\[0\]\.(shape\[|size\()", use.statement):
        return None
    line = locate(node)[0]
    concatenate = m.Call(
        func=m.Attribute(value=m.Name("torch"), attr=m.Name()), args=[m.Arg(m.List() | m.Tuple()), m.ZeroOrMore()]
    )
    for call in findall(fn.node, concatenate):
        first = call.args[0].value.elements[0].value if call.args[0].value.elements else None
        if call.func.attr.value in CONCATENATE and first is not None and code_of(first) == f"{use.variable}[0]":
            if locate(call)[0] < line:
                return call
    return None
