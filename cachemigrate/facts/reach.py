"""Whether a file's tuple-cache code can be reached at all.

A model file's cache enters through the forward of one of its ``PreTrainedModel`` classes: every caller (a user,
``generate()``, a composite model) calls one of those. When the file defines such classes and none of their
forwards takes a cache parameter, its tuple-cache code (typically a Bart or Bert attention copied into an
encoder-only model: wav2vec2, LayoutLM, TAPAS...) never receives a cache, and the file is left as it is: there is
nothing a migration could change in what the model does, and nothing the probe could check.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from .analysis import ModuleInfo

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
        forward = info.classes[name].methods.get("forward")
        if forward is not None and (forward.cache_params or _reads_var_kwargs(forward.node)):
            return []
    return models


def _reads_var_kwargs(function) -> bool:
    """The forward takes ``**kwargs`` and its body reads them (hands them on, or looks into them): a cache could come
    in that way. ``**kwargs`` that the body never names (TAPAS's masked-LM head) drop whatever is passed."""
    star = function.params.star_kwarg
    if not isinstance(star, cst.Param):
        return False
    return bool(m.findall(function.body, m.Name(star.name.value)))
