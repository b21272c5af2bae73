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
    """``cache[<integer>]``."""
    return m.Subscript(value=m.Name(cache), slice=[m.SubscriptElement(slice=m.Index(value=m.Integer()))])


def single_layers(classes: dict[str, ClassInfo]) -> dict[str, tuple[str, str]]:
    """model class -> (attribute, layer class) of each one-layer model of the file (see the module's docstring)."""
    found = {}
    for cls in classes.values():
        forward = cls.methods.get("forward")
        if cls.module_lists or not _takes_cache(cls) or not _pretrained(cls, classes):
            continue
        for cache in forward.cache_params:
            picked = _layer_past(cache)
            assigned = m.Assign(targets=[m.AssignTarget(m.Name())], value=picked | m.IfExp(body=picked))
            names = {node.targets[0].target.value for node in findall(forward.node, assigned)}
            handed = picked | m.Name(m.MatchIfTrue(lambda name, names=names: name in names))
            for call in findall(forward.node, m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name()))):
                attribute = call.func.attr.value
                layer = cls.submodules.get(attribute)
                if layer in classes and _takes_cache(classes[layer]) and any(
                    m.matches(arg.value, handed) for arg in call.args
                ):
                    found[cls.name] = (attribute, layer)
    return found
