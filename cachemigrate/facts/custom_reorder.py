"""A ``_reorder_cache`` that reorders each cached tensor with a function of its own, not by selecting rows of the
batch dimension: ``tuple(_reorder_stacked(state, beam_idx.to(state.device)) for state in layer_past)``, where the
function views the batch as beams of several stacked rows each (a retrieval head over a seq2seq generator decodes
``n_docs`` rows per beam). A Cache reorders itself only by rows (``reorder_cache(beam_idx)``: ``index_select(0,
beam_idx)`` on every tensor; ``batch_select_indices`` likewise), so no Cache method stands for such a function, and
the guard CM021 writes (``past.reorder_cache(beam_idx)``) would select the wrong rows. :func:`custom_reorder` finds
the function; the heads whose ``_reorder_cache`` uses one are role ``stacked_reorder`` (:func:`stacked_reorders`),
whose rule (CM026) applies the function to every tensor of a Cache instead."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..traverse import findall

# how a tensor is reordered by rows: what a Cache's own reorder_cache does
ROW_SELECT = ("index_select",)


def custom_reorder(function: cst.FunctionDef, module_functions: set[str]) -> str | None:
    """The name of the function ``function`` (a ``_reorder_cache``) reorders the cached tensors with, where that is a
    function of its own (defined inside it, or at the module's top level) called in a comprehension over one layer's
    tensors; None where it selects rows (``state.index_select(0, beam_idx)``) or calls nothing of its own."""
    comp = reorder_comprehension(function, module_functions)
    return comp.elt.func.value if comp is not None else None


def reorder_comprehension(function: cst.FunctionDef, module_functions: set[str]) -> cst.GeneratorExp | None:
    """The comprehension over one layer's tensors of :func:`custom_reorder` (``_reorder_stacked(state, ...) for
    state in layer_past``): its element reorders the tensor its target names."""
    nested = {node.name.value for node in findall(function.body, m.FunctionDef())}
    own = nested | module_functions
    for comp in findall(function.body, m.GeneratorExp() | m.ListComp()):
        target = comp.for_in.target
        if not isinstance(target, cst.Name) or not isinstance(comp.elt, cst.Call):
            continue
        call = comp.elt
        first = call.args[0].value if call.args else None
        if isinstance(call.func, cst.Name) and call.func.value in own and m.matches(first, m.Name(target.value)):
            return comp
    return None


def custom_reorder_message(cls: str, function: str, reorder: str, built: str) -> str:
    """Why ``cls._reorder_cache`` cannot be migrated by a rule, and what porting it by hand takes."""
    return (
        f"the file wraps a model it builds with {built} and hands it the past, and {cls}.{function} reorders each "
        f"cached tensor with its own `{reorder}(...)`, not by selecting rows of the batch (`index_select(0, beam_idx)`"
        "): no Cache method does that (`Cache.reorder_cache(beam_idx)` and `batch_select_indices` select rows, and "
        "would pick the wrong ones here), and transformers 4.57 and 5.25 still call a model's own `_reorder_cache` "
        "in beam search, handing it the Cache. Port it by hand: where it is handed a Cache, apply "
        f"`{reorder}` to every tensor of every layer in place (4.42-4.53: `cache.key_cache[i]` / `cache.value_cache[i]`; "
        "4.54 and later: `cache.layers[i].keys` / `.values`; an `EncoderDecoderCache` holds a "
        "`self_attention_cache` and a `cross_attention_cache`, each to reorder) and return it, keeping the tuple "
        "code for tuples"
    )


def stacked_reorders(classes: dict, heads: list[str], functions: dict) -> list[str]:
    """The heads (of a file with heads over a library model) whose ``_reorder_cache`` reorders each cached tensor
    with a function of its own (:func:`custom_reorder`): role ``stacked_reorder``, whose rules reorder a Cache's
    tensors with that function (CM026) instead of by rows (CM021)."""
    tops = {fn.name for fn in functions.values() if fn.cls is None}
    found = []
    for name in heads:
        method = classes[name].methods.get("_reorder_cache")
        if method is not None and custom_reorder(method.node, tops):
            found.append(name)
    return found
