"""One-layer stacks: a model whose single layer is an attribute, not an ``nn.ModuleList`` (speculative-decoding
drafters: ``self.layer = DraftLayer(config)``), and whose past is a tuple of one layer's past, handed to that layer
as ``past_key_values[0]``. Such a model is the base model of its file, as one holding a list of blocks is: it makes
the Cache, its layer is layer 0 (``layer_idx=0``), and the whole Cache is what it hands its layer.

:func:`single_layers` finds them by what they do, never by a name: a class of the file that derives from a
``*PreTrainedModel`` (the library's own included), holds no ``nn.ModuleList``, takes a cache in its forward, and
hands ``cache[<integer>]`` (directly, or through a local assigned ``cache[<integer>]`` or ``cache[<integer>] if ...
else ...``) to ``self.<attr>(...)``, where ``<attr>`` is built in ``__init__`` from a class of the file whose forward
takes a cache.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from .. import diagnostics as codes
from ..diagnostics import Diagnostic
from ..traverse import findall
from .model import ClassInfo


def _pretrained(cls: ClassInfo, classes: dict[str, ClassInfo], seen: frozenset = frozenset()) -> bool:
    for base in cls.bases:
        if base.rsplit(".", 1)[-1].endswith("PreTrainedModel"):
            return True
        if base in classes and base not in seen and _pretrained(classes[base], classes, seen | {base}):
            return True
    return False


def _takes_cache(cls: ClassInfo | None) -> bool:
    forward = cls.methods.get("forward") if cls is not None else None
    return bool(forward and forward.cache_params)


def _layer_past(cache: str) -> m.BaseMatcherNode:
    """``cache[<integer>]`` (negative too)."""
    index = m.Integer() | m.UnaryOperation(operator=m.Minus(), expression=m.Integer())
    return m.Subscript(value=m.Name(cache), slice=[m.SubscriptElement(slice=m.Index(value=index))])


def _first(read: cst.Subscript) -> bool:
    """``cache[0]``: the past of the first layer."""
    index = read.slice[0].slice.value
    return isinstance(index, cst.Integer) and int(index.value, 0) == 0


def _handed(cls: ClassInfo, classes: dict[str, ClassInfo]) -> tuple[str, str, cst.Subscript] | None:
    """(attribute, layer class, the ``cache[<integer>]`` read) where ``cls``'s forward hands one layer's past to a
    single layer it holds (a class of the file taking a cache, built in ``__init__``); None otherwise."""
    forward = cls.methods.get("forward")
    if cls.module_lists or not _takes_cache(cls):
        return None
    for cache in forward.cache_params:
        picked = _layer_past(cache)
        assigned = {
            node.targets[0].target.value: node.value.body if isinstance(node.value, cst.IfExp) else node.value
            for node in findall(
                forward.node, m.Assign(targets=[m.AssignTarget(m.Name())], value=picked | m.IfExp(body=picked))
            )
        }
        for call in findall(forward.node, m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name()))):
            layer = cls.submodules.get(call.func.attr.value)
            if layer not in classes or not _takes_cache(classes[layer]) or classes[layer].module_lists:
                continue  # a layer takes a past and stacks nothing (a model handed `past[0]` is no layer)
            for arg in call.args:
                read = arg.value if m.matches(arg.value, picked) else None
                if isinstance(arg.value, cst.Name):
                    read = assigned.get(arg.value.value)
                if read is not None:
                    return call.func.attr.value, layer, read
    return None


def single_layers(classes: dict[str, ClassInfo]) -> dict[str, tuple[str, str]]:
    """model class -> (attribute, layer class) of each one-layer model of the file (see the module's docstring)."""
    found = {}
    for cls in classes.values():
        handed = _handed(cls, classes)
        if handed and _pretrained(cls, classes) and _first(handed[2]):
            found[cls.name] = handed[:2]
    return found


def one_layer_diagnostic(module: cst.Module, info, path: str, locate) -> Diagnostic | None:
    """CM903 at the read of a class that hands one layer's past to a single layer it holds but is not taken for a
    one-layer model, saying what it lacks; None when the file has no such class."""
    models = single_layers(info.classes)
    for cls in info.classes.values():
        handed = _handed(cls, info.classes)
        if handed is None or cls.name in models:
            continue
        attribute, layer, read = handed
        if not _pretrained(cls, info.classes):
            missing = "it is no PreTrainedModel, so it cannot be told from a block that hands a past on"
        else:
            missing = "that is not the past's first entry, the only layer's past of a one-layer model"
        line, column = locate(read)
        message = (
            f"{cls.name} hands `{module.code_for_node(read)}` to its single layer `self.{attribute}` ({layer}), but "
            f"{missing}: no model of the file builds a stack of its blocks (an `nn.ModuleList` of blocks, or a "
            "PreTrainedModel whose single layer is handed the past's first entry, `past_key_values[0]`), and that "
            "model makes the Cache and gives each attention its layer index; the file was left unchanged"
        )
        return Diagnostic(path, line, column, codes.NO_ROLES, message)
    return None


def after_single_layer(cls: ClassInfo | None, body: list) -> int | None:
    """The index after the top-level statement of ``body`` that calls a one-layer model's single layer (where the
    Cache is complete: the ``after_loop`` of a model with a list of blocks)."""
    for attribute in cls.single_layers if cls is not None else ():
        call = m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name(attribute)))
        index = next((i for i, stmt in enumerate(body) if findall(stmt, call)), None)
        if index is not None:
            return index + 1
    return None
