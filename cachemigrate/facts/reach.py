"""Whether a file's tuple-cache code can be reached at all.

A model file's cache enters through the forward of one of its ``PreTrainedModel`` classes: every caller (a user,
``generate()``, a composite model) calls one of those. When the file defines such classes and none of their
forwards takes a cache parameter, its tuple-cache code (typically a Bart or Bert attention copied into an
encoder-only model: wav2vec2, LayoutLM, TAPAS...) never receives a cache, and the file is left as it is: there is
nothing a migration could change in what the model does, and nothing the probe could check.

A forward's ``**kwargs`` can carry a cache when the body hands them on or looks into them for a cache name. They
cannot when the body only looks up other keys by name (XLNet's ``kwargs["use_cache"]``, a deprecated flag) and hands
them on only to a model class of the file whose own forward cannot take one (an XLNet head to its ``XLNetModel``):
such a file's past (XLNet's ``mems``, a memory of hidden states under its own parameter name) never comes in as a
cache, as for Transformer-XL, whose forwards take no ``**kwargs``.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from .analysis import ModuleInfo
from ..traverse import findall

PRETRAINED = "PreTrainedModel"


def model_classes(info: ModuleInfo) -> list[str]:
    """The file's classes that derive from ``PreTrainedModel`` (through its other classes), in file order."""
    found: dict[str, bool] = {}

    def derives(name: str, seen: frozenset = frozenset()) -> bool:
        if name in found:
            return found[name]
        cls = info.classes[name]
        result = any(
            base.split(".")[-1] == PRETRAINED
            or (base in info.classes and base not in seen and derives(base, seen | {name}))
            for base in cls.bases
        )
        found[name] = result
        return result

    return [name for name in info.classes if derives(name)]


def unreachable_cache(info: ModuleInfo) -> list[str]:
    """The model classes of a file none of which takes a cache (empty when some does, or there are none)."""
    models = model_classes(info)
    for name in models:
        if _takes_cache(info, name, set(models), frozenset()):
            return []
    return models


def _takes_cache(info: ModuleInfo, name: str, models: set[str], seen: frozenset) -> bool:
    """The forward of model class ``name`` takes a cache parameter, or ``**kwargs`` that can carry one."""
    forward = info.classes[name].methods.get("forward")
    if forward is None:
        return False
    if forward.cache_params:
        return True
    star = forward.node.params.star_kwarg
    if not isinstance(star, cst.Param):
        return False
    kwargs = star.name.value
    reads = findall(forward.node.body, m.Name(kwargs))
    if not reads:  # `**kwargs` that the body never names (TAPAS's masked-LM head) drop whatever is passed
        return False
    if not info.era_cache_names:  # the era's cache names are not known: any read could be one
        return True
    harmless = {id(node) for node in _lookups(forward.node.body, kwargs, set(info.era_cache_names))}
    for call in findall(forward.node.body, m.Call()):
        for arg in call.args:
            if arg.star == "**" and m.matches(arg.value, m.Name(kwargs)):
                target = _model_attribute(info, name, call.func)
                if target is None or target not in models or target in seen:
                    return True
                if _takes_cache(info, target, models, seen | {name}):
                    return True
                harmless.add(id(arg.value))
    return any(id(node) not in harmless for node in reads)


def _lookups(body, kwargs: str, cache_names: set[str]):
    """The ``kwargs`` names in ``"key" in kwargs``, ``kwargs["key"]``, ``kwargs.get("key", ...)`` and
    ``kwargs.pop("key", ...)`` whose key is a string that is not a cache name."""
    name = m.Name(kwargs)
    for node in findall(body, m.Comparison()):
        for target in node.comparisons:
            if isinstance(target.operator, (cst.In, cst.NotIn)) and m.matches(target.comparator, name):
                if _plain_key(node.left, cache_names):
                    yield target.comparator
    for node in findall(body, m.Subscript(value=name)):
        if len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            if _plain_key(node.slice[0].slice.value, cache_names):
                yield node.value
    for node in findall(body, m.Call(func=m.Attribute(value=name, attr=m.Name("get") | m.Name("pop")))):
        if node.args and _plain_key(node.args[0].value, cache_names):
            yield node.func.value


def _plain_key(node, cache_names: set[str]) -> bool:
    return isinstance(node, cst.SimpleString) and node.evaluated_value not in cache_names


def _model_attribute(info: ModuleInfo, name: str, func) -> str | None:
    """The class of ``self.<attr>`` that ``func`` calls, where ``name``'s ``__init__`` builds it."""
    if not m.matches(func, m.Attribute(value=m.Name("self"), attr=m.Name())):
        return None
    return info.classes[name].submodules.get(func.attr.value)
