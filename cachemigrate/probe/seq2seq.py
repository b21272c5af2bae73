"""Decoders with cross-attention: how the probe drives them with shared encoder states.

Two kinds of model take encoder states (a :class:`CrossTarget` each):

- ``seq2seq``: an encoder-decoder head (its forward takes ``decoder_input_ids``), called with
  ``encoder_outputs=(states,)`` (``generate`` gets a ``BaseModelOutput``) so that the encoder is skipped and both models see
  the same states, whatever the encoder's own inputs are (token ids, speech features, pixels);
- ``causal``: a causal-LM head whose forward takes ``encoder_hidden_states`` (Bert, TrOCR, XGLM, BartForCausalLM
  as the decoder of an EncoderDecoderModel), built with ``is_decoder`` and ``add_cross_attention`` on; in a file
  without such a head, the base model that takes them (a Bert-style text model of a vision-and-text file).

The encoder states are random (seeded), as wide as the decoder's cross-attention expects.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass, field

from .models import ModelClasses, build_pair
from .tiny import tiny_config

ENCODER_LEN = 6


def forward_params(cls) -> list[str]:
    return list(inspect.signature(cls.forward).parameters)[1:]


def _required(cls, name: str) -> bool:
    """``cls.forward`` takes ``name`` without a default."""
    parameter = inspect.signature(cls.forward).parameters.get(name)
    return parameter is not None and parameter.default is inspect.Parameter.empty


@dataclass(frozen=True)
class CrossTarget:
    """A model class (of both files) that attends to encoder states, and how to call it."""

    kind: str  # "seq2seq" | "causal"
    orig: ModelClasses
    migr: ModelClasses
    config_changes: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.orig.model_class.__name__

    def config(self, attn: str = "eager", torchscript: bool = False):
        config = tiny_config(self.orig.config_class, attn=attn, torchscript=torchscript)
        for key, value in self.config_changes.items():
            setattr(config, key, value)
        return config

    def width(self, model) -> int:
        """The width of the encoder states the decoder's cross-attention reads."""
        config = model.config
        for name in ("cross_attention_hidden_size", "encoder_hidden_size", "d_model", "hidden_size"):
            value = getattr(config, name, None)
            if isinstance(value, int) and value > 0:
                return value
        # a composite config (MusicGen's) names no width: the encoder's own config does
        encoder = model.get_encoder() if callable(getattr(model, "get_encoder", None)) else None
        width = getattr(getattr(encoder, "config", None), "hidden_size", None)
        if isinstance(width, int) and width > 0:
            return width
        raise LookupError(f"{type(config).__name__}: no hidden size to build encoder states with")

    def inputs(self, tokens, states, past=None, **kwargs) -> dict:
        """Keyword arguments for one decoder call on ``tokens`` attending to ``states``."""
        if self.kind == "seq2seq":
            # a tuple, as return_dict=False models and torch.jit.trace want it; return_dict models wrap it
            inputs = {"decoder_input_ids": tokens, "encoder_outputs": (states,)}
            if _required(self.orig.model_class, "input_ids"):  # FSMT before 4.36: `forward(self, input_ids, ...)`,
                inputs["input_ids"] = None  # which runs the encoder only when it is handed no encoder outputs
        else:
            inputs = {"input_ids": tokens, "encoder_hidden_states": states}
        return {**inputs, "past_key_values": past, **kwargs}


def cross_targets(original: ModelClasses, migrated: ModelClasses, settings: dict | None = None) -> list[CrossTarget]:
    """The seq2seq head first, then a causal head with cross-attention inputs, for each the file has. ``settings``
    (``--config``) are set over each one's config last, as for the decoder-only checks."""
    settings = dict(settings or {})
    targets = []
    if original.seq2seq_class is not None and migrated.seq2seq_class is not None:
        seq2seq = (_as_model(original, "seq2seq"), _as_model(migrated, "seq2seq"))
        targets.append(CrossTarget("seq2seq", *seq2seq, settings))
    if _decoder_over_encoder(original) and _decoder_over_encoder(migrated):
        changes = {"is_decoder": True}
        if hasattr(tiny_config(original.config_class), "add_cross_attention"):
            changes["add_cross_attention"] = True
        targets.append(CrossTarget("causal", original, migrated, {**changes, **settings}))
    return targets


def _decoder_over_encoder(classes: ModelClasses) -> bool:
    """The model driven on ``input_ids`` (the causal head, else the base model of a file without one, as a text
    model of a vision-and-text file) also takes encoder states: a Bert-style decoder."""
    return classes.decoder_only and "encoder_hidden_states" in forward_params(classes.model_class)


def decoder_changes(classes: ModelClasses) -> dict:
    """Config changes that make a causal head (or base model) which can take encoder states a decoder (Bert's keep
    no cache unless ``config.is_decoder``): the decoder-only checks then drive its cache, without encoder states."""
    return {"is_decoder": True} if _decoder_over_encoder(classes) else {}


def _as_model(classes: ModelClasses, kind: str) -> ModelClasses:
    """The classes with the seq2seq head as the model to instantiate, with its own config class (MusicGen's
    seq2seq head takes a composite config; its decoder head the decoder's)."""
    config_class = getattr(classes.seq2seq_class, "config_class", None) or classes.config_class
    return ModelClasses(config_class, classes.seq2seq_class, classes.base_class, classes.module_name)


def build_cross_pair(target: CrossTarget, seed: int, attn: str = "eager", torchscript: bool = False):
    return build_pair(target.orig, target.migr, target.config(attn, torchscript), seed)


def encoder_states(seed: int, batch: int, width: int, length: int = ENCODER_LEN, salt: int = 0):
    import torch

    generator = torch.Generator().manual_seed(seed * 1000 + 500 + salt)
    return torch.randn(batch, length, width, generator=generator)


def library_encoder(width: int, seed: int):
    """A tiny BertModel from the installed transformers: the encoder of the EncoderDecoderModel check, the same
    (deep-copied) on both sides."""
    import torch
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=99, hidden_size=width, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
    torch.manual_seed(seed + 1)
    encoder = BertModel(config).eval()
    return encoder, copy.deepcopy(encoder)
