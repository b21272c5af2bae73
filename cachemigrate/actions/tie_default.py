"""Where 4.x's default ``get_input_embeddings`` raises, for :mod:`.tie_sources`.

A class of the file that does not define ``get_input_embeddings`` gets ``PreTrainedModel``'s: 4.51 returns the
``get_input_embeddings()`` of the attribute named by ``base_model_prefix`` and raises ``NotImplementedError`` when
the model has no such attribute; 4.57 first tries ``self.<_input_embed_layer>`` (``embed_tokens``) and
``self.model.embed_tokens``. When the chain through ``base_model_prefix`` ends at a class of the file that has none
of these, every 4.x ``tie_weights`` raised building the head whose output embeddings it would tie (with
``tie_word_embeddings`` true), and tied nothing otherwise: the head was never tied."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..traverse import findall

_DEFAULT_NAMES = ("embed_tokens", "model")  # 4.57's fallbacks before base_model_prefix


def _base_name(base: cst.Arg) -> str | None:
    value = base.value
    if isinstance(value, cst.Name):
        return value.value
    return value.attr.value if isinstance(value, cst.Attribute) else None


def _assigned(classes: list[cst.ClassDef], attribute: str) -> bool:
    """Whether a method of ``classes`` assigns ``self.<attribute>`` (or may: ``setattr``, ``__getattr__``)."""
    target = m.AssignTarget(m.Attribute(m.Name("self"), m.Name(attribute)))
    dynamic = m.Call(m.Name("setattr")) | m.FunctionDef(m.Name("__getattr__") | m.Name("__setattr__"))
    return any(findall(cls, target) or findall(cls, dynamic) for cls in classes)


def default_input_raises(sources, name: str, depth: int = 0) -> str | None:
    """The class of the file whose default ``get_input_embeddings`` raises at the end of the chain from class
    ``name`` through ``base_model_prefix`` (``name`` itself, or the class of its prefix attribute, ...); None when
    the chain returns something or cannot be followed from the file."""
    if depth > 8 or sources.method(name, "get_input_embeddings") is not None:
        return None
    mro = sources.mro(name)
    for cls in mro:
        for base in cls.bases:
            base_name = _base_name(base)
            if base_name is None or (base_name not in sources.classes and not base_name.endswith("PreTrainedModel")):
                return None  # a base from elsewhere may define it
        if sources.class_assigns(cls, "_input_embed_layer") or sources.class_assigns(cls, "get_input_embeddings"):
            return None
    if any(_assigned(mro, attribute) for attribute in _DEFAULT_NAMES):
        return None
    prefix = sources.class_string(name, "base_model_prefix")
    if not prefix:
        return None
    child = sources.attributes(name).get(prefix)
    if child is not None:
        return default_input_raises(sources, child, depth + 1)
    return None if _assigned(mro, prefix) else name
