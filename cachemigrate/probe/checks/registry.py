"""The check registry: every check is one function, registered with :func:`check`.

A check takes a :class:`~cachemigrate.probe.context.Probe` and returns a one-line detail of what it found equal, or
raises :class:`~cachemigrate.probe.compare.CheckFailed` (the migrated model behaves differently) or
:class:`~cachemigrate.probe.compare.CheckSkipped` (it does not apply, for a reason found while running). Its
docstring says what it checks. Conditions known before running (a generation head, sdpa support, ...) are given to
:func:`check` as ``requires``: functions of the probe that return None when met, else the reason to skip.

To add a check, add a function to the module of its group under ``checks/`` (or a new module, listed in
``checks/__init__.py``); the table lists checks in the order they are registered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

Condition = Callable[..., Optional[str]]


@dataclass(frozen=True)
class Check:
    """A registered check."""

    name: str
    run: Callable[..., str]
    doc: str
    requires: tuple[Condition, ...] = ()
    grad: bool = False  # runs with autograd on (the rest run under torch.no_grad())

    def skip_reason(self, probe) -> str | None:
        """None when the check applies to ``probe``, else why it is skipped."""
        for condition in self.requires:
            reason = condition(probe)
            if reason:
                return reason
        return None

    def applies(self, probe) -> bool:
        return self.skip_reason(probe) is None


REGISTRY: dict[str, Check] = {}


def check(*requires: Condition, grad: bool = False):
    """Register the decorated function as the check of the same name."""

    def register(function):
        name = function.__name__
        if name in REGISTRY:
            raise ValueError(f"check {name!r} is registered twice")
        doc = " ".join((function.__doc__ or "").split())
        if not doc:
            raise ValueError(f"check {name!r} has no docstring saying what it checks")
        REGISTRY[name] = Check(name, function, doc, tuple(requires), grad)
        return function

    return register


# -- conditions -------------------------------------------------------------------------------------------------------


def needs_head(probe) -> str | None:
    """The module has a causal-LM head (a GenerationMixin class) to generate with."""
    return None if probe.has_head else "no GenerationMixin head in the module"


def needs_sdpa(probe) -> str | None:
    cls = probe.orig.model_class
    return None if getattr(cls, "_supports_sdpa", False) else f"{cls.__name__} does not support sdpa"


def needs_gradient_checkpointing(probe) -> str | None:
    cls = probe.orig.model_class
    supported = getattr(cls, "supports_gradient_checkpointing", False)
    return None if supported else f"{cls.__name__} does not support gradient checkpointing"


def needs_static(probe) -> str | None:
    """static=True, or static=None and the migrated model claims ``_supports_static_cache``."""
    if probe.static is False:
        return "static=False"
    if probe.static is None and not getattr(probe.migr.model_class, "_supports_static_cache", False):
        return "migrated model does not set _supports_static_cache"
    return None


def needs_decoder_only(probe) -> str | None:
    """The module has a model that runs on ``input_ids`` alone (an encoder-decoder model alone is driven by the
    cross checks)."""
    if probe.orig.decoder_only:
        return None
    return "encoder-decoder model only: driven by the cross_* checks"


def needs_cross(probe) -> str | None:
    """The module has a decoder with cross-attention (a seq2seq head, or a causal head taking encoder states)."""
    return None if probe.cross_targets else "no decoder with cross-attention in the module"


def needs_encoder_decoder_decoder(probe) -> str | None:
    """The module has a causal head that EncoderDecoderModel can use as its decoder (it takes
    ``encoder_hidden_states`` and ``encoder_attention_mask``)."""
    import inspect

    head = probe.orig.head_class
    if head is None:
        return "no causal-LM head in the module"
    params = inspect.signature(head.forward).parameters
    if "encoder_hidden_states" not in params or "encoder_attention_mask" not in params:
        return f"{head.__name__} takes no encoder_hidden_states/encoder_attention_mask"
    from transformers import CONFIG_MAPPING

    model_type = getattr(probe.orig.config_class, "model_type", "")
    if model_type not in CONFIG_MAPPING:
        return f"EncoderDecoderModel cannot build a config for model type {model_type!r} (not an AutoConfig type)"
    return None
