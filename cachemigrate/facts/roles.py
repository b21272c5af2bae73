"""Roles of the classes of a modeling file, from how they hand the cache on (class names never matter).

attention   reads its cache parameter as a tuple (indexing, ``torch.cat``...) and hands it to no other
            attention or block
block       hands its cache parameter (or a part of it: Bart's decoder layer splits the layer past into a
            self-attention part ``[:2]`` and a cross-attention part ``[-2:]``) to ``self.<attr>(...)``, where
            ``<attr>`` is built from an attention or another block in ``__init__``
base_model  builds an ``nn.ModuleList`` of blocks and has a cache parameter
pretrained  the ``PreTrainedModel`` class of the file: the in-file base of the base model, or of the classes
            that wrap it (Bert's encoder is a plain module, wrapped by ``BertModel(BertPreTrainedModel)``)
head        other subclasses of ``pretrained`` that take a cache, or define ``prepare_inputs_for_generation``
            or ``_reorder_cache``; a wrapper of the base model that reads the past (``BertModel`` reads its
            length) is a head, not an attention
reader      a class outside the layer stack whose only tuple use of the cache is reading the past length
            (``past_key_values[0][0].shape[2]``): ``BertModel``, SpeechT5's text prenet, positional embeddings.
            It reads the cache it is handed, before the stack turns a tuple into a Cache.
"""

from __future__ import annotations

from .model import ClassInfo, FunctionInfo
from ..traverse import findall


def _forward(cls: "ClassInfo") -> "FunctionInfo | None":
    return cls.methods.get("forward")


def _takes_cache(cls: "ClassInfo") -> bool:
    fwd = _forward(cls)
    return bool(fwd and fwd.cache_params)


def _stacks(cls: "ClassInfo") -> dict[str, str]:
    """The layers a class stacks: its ``nn.ModuleList`` of blocks, or its single layer (facts/one_layer.py)."""
    return {**cls.module_lists, **cls.single_layers}


def _passing(classes: dict, targets: set[str], exclude: set[str], allow_lists: bool = False) -> set[str]:
    """Classes (not in ``exclude``) that hand a cache variable to ``self.<attr>(...)`` built from a class of
    ``targets`` or of the result, to a fixed point."""
    found: set[str] = set()
    while True:
        more = set(found)
        for c in classes.values():
            if c.name in more or c.name in exclude or not _takes_cache(c) or (_stacks(c) and not allow_lists):
                continue
            into = (targets | more) - {c.name}
            attrs = {f"self.{a}" for a, ks in c.choices.items() if set(ks) & into}
            if attrs & _forward(c).passes_to_self_attr():
                more.add(c.name)
        if more == found:
            return found
        found = more


def _length_reads(fn: "FunctionInfo") -> set:
    """The Name nodes of ``C[0][0].shape[k]`` / ``C[0][0].size(k)`` reads of a cache variable in ``fn``."""
    import libcst as cst
    import libcst.matchers as m

    cache = m.Name(m.MatchIfTrue(lambda name: name in (fn.cache_names or set(fn.cache_params))))
    tensor = m.Subscript(value=m.Subscript(value=cache))
    read = m.Subscript(value=m.Attribute(value=tensor, attr=m.Name("shape"))) | m.Call(
        func=m.Attribute(value=tensor, attr=m.Name("size"))
    )
    found = set()
    for node in findall(fn.node, read):
        subscript = node.value.value if isinstance(node, cst.Subscript) else node.func.value
        found.add(subscript.value.value)
    return found


def _reads_only_length(cls: "ClassInfo") -> bool:
    fwd = _forward(cls)
    legacy = {use.node for use in fwd.legacy()} if fwd else set()
    return bool(legacy) and legacy <= _length_reads(fwd)


def assign_roles(classes: dict[str, "ClassInfo"]) -> dict[str, list[str]]:
    # Classes that hold a ModuleList of cache-taking modules: containers of layers (the base model, loosely)
    containers = {
        c.name
        for c in classes.values()
        if _takes_cache(c) and any(k in classes and _takes_cache(classes[k]) for k in _stacks(c).values())
    }
    # ... and the classes wrapping them (Bert's BertModel around BertEncoder; heads around a model)
    wrappers = _passing(classes, containers, containers, allow_lists=True)
    # A class that holds a ModuleList is a container of layers, never the attention itself.
    readers = [
        c.name for c in classes.values() if c.name not in containers and _takes_cache(c) and _reads_only_length(c)
    ]
    candidates = [
        c.name
        for c in classes.values()
        if _takes_cache(c)
        and _forward(c).legacy()
        and not _stacks(c)
        and c.name not in wrappers
        and c.name not in readers
    ]
    # Blocks hand their cache to an attention or to another block (GPT-Neo: block -> attention wrapper ->
    # self-attention), found to a fixed point; the file order is kept.
    carriers = _passing(classes, set(candidates), wrappers)
    attention = [name for name in candidates if name not in carriers]
    blocks = [name for name in classes if name in carriers]
    base_models = [c.name for c in classes.values() if _takes_cache(c) and set(_stacks(c).values()) & set(blocks)]
    pretrained: list[str] = []
    for name in base_models:
        for base in classes[name].bases:
            if base in classes and base not in pretrained:
                pretrained.append(base)
    if not pretrained:  # the base model is a plain module: the PreTrainedModel is what its wrappers derive from
        roles = set(attention) | set(blocks) | set(base_models) | wrappers
        for name in classes:
            if name in wrappers:
                for base in classes[name].bases:
                    if base in classes and base not in roles and base not in pretrained:
                        pretrained.append(base)

    def derives(c: "ClassInfo", roots: list[str], seen: frozenset = frozenset()) -> bool:
        return any(
            b in roots or (b in classes and b not in seen and derives(classes[b], roots, seen | {b})) for b in c.bases
        )

    heads = [
        c.name
        for c in classes.values()
        if c.name not in base_models
        and c.name not in pretrained
        and derives(c, pretrained)
        and (_takes_cache(c) or "prepare_inputs_for_generation" in c.methods or "_reorder_cache" in c.methods)
    ]
    return {
        "attention": attention,
        "block": blocks,
        "base_model": base_models,
        "pretrained": pretrained,
        "head": heads,
        "reader": readers,
    }
