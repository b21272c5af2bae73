"""What the cross-version probe needs to know about the transformers it runs on, found by feature tests.

The same worker code runs on transformers 4.50 to 5.x; nothing here parses a version string to decide anything
(the version is only reported). Everything imports torch and transformers lazily.
"""

from __future__ import annotations

import contextlib
import logging
import warnings

from .compare import pairs_of_cache_layout
from .context import MAX_NEW_TOKENS

BEAMS = 3


def installed_version() -> str:
    """The transformers version of this interpreter, from package metadata (never by importing it)."""
    from importlib import metadata

    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return "not installed"


def is_cache(value) -> bool:
    from transformers.cache_utils import Cache

    return isinstance(value, Cache)


def in_cache_layout(before, after) -> bool:
    """A legacy past is what a DynamicCache holds when every layer is a (key, value) pair of 4-D tensors of one
    shape that grew on axis -2 between ``before`` and ``after`` (the same model's past one step later). Shapes
    alone cannot tell [batch, heads, seq, d] from [batch, seq, heads, d] (or a sequence-first past); growth can."""
    if not (pairs_of_cache_layout(before) and pairs_of_cache_layout(after)) or len(before) != len(after):
        return False
    return all([i for i in range(4) if old[0].shape[i] != new[0].shape[i]] == [2] for old, new in zip(before, after))


def cache_from_tuple(legacy):
    """A DynamicCache holding a legacy ``((k, v), ...)`` past, with the API this runtime has: ``from_legacy_cache``
    up to 4.57, the constructor from 5.0 (it fills the cache from 4.50 on)."""
    from transformers.cache_utils import DynamicCache

    if hasattr(DynamicCache, "from_legacy_cache"):
        return DynamicCache.from_legacy_cache(legacy)
    return DynamicCache(legacy)


def past_of(output):
    """The past a model returned: ``output[1]`` of a tuple, else the cache field of the output (named ``cache`` from
    5.24, ``past_key_values`` before)."""
    if isinstance(output, tuple):
        return output[1]
    keys = list(output.keys())
    for name in ("cache", "past_key_values"):
        if name in keys:
            return output[name]
    return None


def logits_of(output):
    """Logits of a head, else the last hidden state of a base model."""
    if isinstance(output, tuple):
        return output[0]
    found = output.get("logits")
    return found if found is not None else output["last_hidden_state"]


class Stepper:
    """The inputs of the calls the cross-version probe makes, stepped as the original needs (see
    :func:`.worker._conventions`): the prompt (``step=None``), or cached step ``step`` of a sequence; with an all-ones
    attention mask over every position so far when ``mask``, the whole sequence so far when ``refeeds``."""

    def __init__(self, how: dict) -> None:
        self.mask, self.refeeds = bool(how.get("mask")), bool(how.get("refeeds"))

    def call(self, full, step: int | None) -> dict:
        import torch

        from .context import PROMPT_LEN

        end = PROMPT_LEN if step is None else PROMPT_LEN + step + 1
        start = 0 if step is None or self.refeeds else end - 1
        inputs = {"input_ids": full[:, start:end]}
        if self.mask:
            inputs["attention_mask"] = torch.ones(full.shape[0], end, dtype=torch.long)
        return inputs


def generate(model, ids, mask=None, **kwargs):
    """Greedy (or ``num_beams``) generate of MAX_NEW_TOKENS tokens, pad id 0."""
    import torch

    mask = torch.ones_like(ids) if mask is None else mask
    kwargs.setdefault("num_beams", 1)
    return model.generate(
        ids, attention_mask=mask, max_new_tokens=MAX_NEW_TOKENS, do_sample=False, pad_token_id=0, **kwargs
    )


@contextlib.contextmanager
def quiet():
    """One torch thread, no Python warnings, transformers and other logging below ERROR switched off."""
    import torch
    from transformers.utils import logging as hf_logging

    threads, verbosity, disabled = torch.get_num_threads(), hf_logging.get_verbosity(), logging.root.manager.disable
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(disabled)
        hf_logging.set_verbosity(verbosity)
        torch.set_num_threads(threads)


@contextlib.contextmanager
def recording_caches(model):
    """Record the type of the cache every forward call of ``model`` receives, under either name (``cache`` is what
    5.24's generate() passes)."""
    seen: list[type] = []

    def hook(_module, args, kwargs):
        value = kwargs.get("past_key_values")
        if value is None:
            value = kwargs.get("cache")
        if value is None and len(args) > 1:
            value = args[1]
        seen.append(type(value))

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def generation_head(module, base_class):
    """The causal-LM head of ``module`` when the probe's own discovery found none: a class of the module whose
    forward takes ``past_key_values``, that wraps ``base_class`` and has output embeddings (``lm_head``). Heads of
    files written before transformers 4.52 do not list GenerationMixin; they generate through PreTrainedModel."""
    import inspect

    from transformers import PreTrainedModel

    found = []
    for obj in vars(module).values():
        if not (isinstance(obj, type) and issubclass(obj, PreTrainedModel) and obj.__module__ == module.__name__):
            continue
        if obj is base_class or "past_key_values" not in inspect.signature(obj.forward).parameters:
            continue
        if "prepare_inputs_for_generation" in vars(obj) or obj.__name__.endswith(("ForCausalLM", "LMHeadModel")):
            found.append(obj)
    return min(found, key=lambda c: len(inspect.signature(c.forward).parameters), default=None)
