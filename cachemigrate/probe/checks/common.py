"""Helpers shared by several checks: calling the model under test, generating, watching the past a model gets."""

from __future__ import annotations

import contextlib

from ..compare import CheckFailed, one_line
from ..context import MAX_NEW_TOKENS
from ..side_inputs import side_inputs_for


def call_under_test(function, *args, **kwargs):
    """Call the migrated model on a path that only it must support (the Cache API): its exceptions are failures of
    the check, never set-up errors."""
    try:
        return function(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - any crash here is the failure being checked for
        raise CheckFailed(f"model raised {one_line(exc)}") from exc


def generate(model, ids, mask=None, **kwargs):
    """Greedy (or ``num_beams``) generate of MAX_NEW_TOKENS tokens, pad id 0. A head the probe drives with side
    inputs (see :mod:`..side_inputs`) gets them for the prompt as well: its own generation hooks carry them on."""
    import torch

    if mask is None:
        mask = torch.ones_like(ids)
    kwargs = {**side_inputs_for(type(model), model.config, ids), **kwargs}
    kwargs.setdefault("num_beams", 1)
    return model.generate(
        ids, attention_mask=mask, max_new_tokens=MAX_NEW_TOKENS, do_sample=False, pad_token_id=0, **kwargs
    )


def own_generate(model) -> bool:
    """The head overrides ``generate()`` (MusicGen): whether it hands the model a Cache is up to that code."""
    from transformers import GenerationMixin

    return type(model).generate is not GenerationMixin.generate


@contextlib.contextmanager
def recording_past_types(model):
    """Record the type of ``past_key_values`` that every forward call of ``model`` receives."""
    seen: list[type] = []

    def hook(_module, args, kwargs):
        seen.append(type(kwargs.get("past_key_values", args[1] if len(args) > 1 else None)))

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def tuple_only_library_model(model) -> str | None:
    """Why ``model`` cannot take a Cache on this runtime when it is a head over a library model that takes tuples
    only here (GPT2Model of 4.51.3: ``_supports_cache_class`` False); None otherwise. Such a head keeps the tuple
    path on this runtime, as its original: the Cache checks have nothing to check."""
    base = type(getattr(model, "base_model", model))
    if base is type(model) or base.__module__ == type(model).__module__:
        stack = library_stack(getattr(model, "base_model", model))
        if stack is None or getattr(base, "_supports_cache_class", True):
            return None
        return (
            f"the library layers its model wraps ({type(stack).__name__} of this transformers) take no Cache on this "
            f"runtime, and {base.__name__} does not claim one (`_supports_cache_class` False)"
        )
    if getattr(base, "_supports_cache_class", True):
        return None
    return f"the library model it wraps ({base.__name__} of this transformers) takes no Cache on this runtime"


def unclaimed_library_head(model) -> str | None:
    """Why generate() of this runtime hands ``model`` tuples, not a Cache, when it is a head over a library model
    (a direct submodule that is a transformers ``PreTrainedModel`` of another module than the head's, as an auto
    class builds it) that claims no Cache itself: 4.42-4.53's generate() makes a DynamicCache only for a model
    whose ``_supports_cache_class`` is set, and a head of the file claims none, as its original; None otherwise
    (on 4.54+ generate() hands every model a Cache)."""
    from transformers import PreTrainedModel

    claims = getattr(model, "_supports_default_dynamic_cache", None)
    if claims is None or not hasattr(type(model), "_supports_cache_class") or claims():
        return None
    own = type(model).__module__
    for child in model.children():
        if isinstance(child, PreTrainedModel) and type(child).__module__ != own:
            return (
                f"{type(model).__name__} claims no Cache (`_supports_cache_class` unset, as its original), so this "
                f"runtime's generate() hands it tuples, and the library model it wraps ({type(child).__name__}) "
                "gives back the tuples it is handed"
            )
    return None


def library_stack(model):
    """The first direct submodule of ``model`` that is a transformers model's stack of layers, of another module than
    the model's own (``self.encoder = BertEncoder(config)`` of a head over the library's layers), or None."""
    own = type(model).__module__
    for child in model.children():
        module = type(child).__module__
        if module != own and module.startswith("transformers.models.") and type(child).__name__.endswith(STACKS):
            return child
    return None


STACKS = ("Encoder", "Decoder")  # as cachemigrate.facts.heads reads a library model's stack of layers
