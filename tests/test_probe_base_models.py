"""Files without a generation head: the probe drives their base model, found whatever config most classes of the
file declare and wherever the blocks sit.

A vision-and-text file (AltCLIP, Chinese-CLIP, BridgeTower, CLAP style) declares the whole model's config on most
classes, and its text model, the one with the tuple cache, is built from the text sub-config; a Bert-style model
keeps its blocks in an encoder module (``encoder.layer``), not as a direct child. The toy file below is written for
this test: a wrapper model holding the text model as a sub-model (tried first, not a base model: its blocks are the
text model's), and a text model with a Bert-style tuple cache (self keys and values, then cross keys and values,
per layer) that it keeps only as a decoder.
"""

from __future__ import annotations

import types

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from cachemigrate.probe import run_probe  # noqa: E402
from cachemigrate.probe.compare import past  # noqa: E402
from cachemigrate.probe.models import discover, matching_classes  # noqa: E402
from cachemigrate.probe.seq2seq import cross_targets, decoder_changes  # noqa: E402
from cachemigrate.probe.tiny import tiny_config  # noqa: E402

TOY = """
import math

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions


class ToyTextConfig(PretrainedConfig):
    model_type = "cm_toy_text"

    def __init__(self, vocab_size=1000, hidden_size=64, num_hidden_layers=3, **kwargs):
        self.vocab_size, self.hidden_size, self.num_hidden_layers = vocab_size, hidden_size, num_hidden_layers
        super().__init__(**kwargs)  # is_decoder and add_cross_attention are PretrainedConfig's


class ToyPairConfig(PretrainedConfig):  # the whole model's config: no vocabulary, no sizes of its own
    model_type = "cm_toy_pair"
    sub_configs = {"text_config": ToyTextConfig}

    def __init__(self, text_config=None, **kwargs):
        self.text_config = ToyTextConfig(**(text_config or {}))
        super().__init__(**kwargs)


class ToyPreTrainedModel(PreTrainedModel):
    config_class = ToyPairConfig
    base_model_prefix = "toy"

    def _init_weights(self, module):
        pass


class ToyPairModel(ToyPreTrainedModel):  # holds the text model as a sub-model: not a base model
    def __init__(self, config):
        super().__init__(config)
        self.text_model = ToyTextModel(config.text_config)
        self.post_init()

    def forward(self, input_ids=None, pixel_values=None, past_key_values=None, use_cache=None):
        return self.text_model(input_ids=input_ids, past_key_values=past_key_values, use_cache=use_cache)


class ToyAttention(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(width, width) for _ in range(3))

    def forward(self, hidden, context=None, past=None):
        query = self.query(hidden).unsqueeze(1)
        if context is not None and past is not None:
            key, value = past  # CROSS REUSE
        elif context is not None:
            key, value = self.key(context).unsqueeze(1), self.value(context).unsqueeze(1)
        else:
            key, value = self.key(hidden).unsqueeze(1), self.value(hidden).unsqueeze(1)
            if past is not None:
                key, value = torch.cat([past[0], key], dim=2), torch.cat([past[1], value], dim=2)
        scores = query @ key.transpose(-1, -2) / math.sqrt(query.shape[-1])
        if context is None:
            start = key.shape[2] - query.shape[2]
            rows = torch.arange(query.shape[2])[:, None] + start
            scores = scores.masked_fill(torch.arange(key.shape[2])[None, :] > rows, float("-inf"))
        return (scores.softmax(-1) @ value).squeeze(1), (key, value)


class ToyLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = ToyAttention(config.hidden_size)
        if config.add_cross_attention:
            self.crossattention = ToyAttention(config.hidden_size)

    def forward(self, hidden, encoder_hidden_states=None, past_key_value=None):
        out, present = self.attention(hidden, past=past_key_value[:2] if past_key_value is not None else None)
        hidden = hidden + out
        if encoder_hidden_states is not None and hasattr(self, "crossattention"):
            cross_past = past_key_value[2:] if past_key_value is not None else None
            out, cross = self.crossattention(hidden, encoder_hidden_states, cross_past)
            hidden, present = hidden + out, present + cross
        return hidden, present


class ToyEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer = nn.ModuleList(ToyLayer(config) for _ in range(config.num_hidden_layers))


class ToyTextModel(ToyPreTrainedModel):  # declares the whole config; built from its text sub-config
    def __init__(self, config):
        super().__init__(config)
        self.embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.encoder = ToyEncoder(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.post_init()

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        encoder_hidden_states=None,
        past_key_values=None,
        use_cache=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
    ):
        use_cache = (use_cache if use_cache is not None else self.config.use_cache) and self.config.is_decoder
        return_dict = return_dict if return_dict is not None else self.config.use_return_dict
        hidden = self.embeddings(input_ids)
        presents = () if use_cache else None
        for i, layer in enumerate(self.encoder.layer):
            layer_past = past_key_values[i] if past_key_values is not None else None
            hidden, present = layer(hidden, encoder_hidden_states, layer_past)
            if use_cache:
                presents = presents + (present,)
        pooled = self.pooler(hidden[:, 0])
        if not return_dict:
            return tuple(v for v in (hidden, pooled, presents) if v is not None)
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=hidden, past_key_values=presents)
"""


def _module(name: str, source: str = TOY) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def test_the_text_model_is_the_base_model_built_from_its_sub_config_on_both_sides():
    original, migrated = _module("cm_toy_pair_original"), _module("cm_toy_pair_migrated")
    classes = discover(original)
    assert classes.head_class is None and classes.base_class is original.ToyTextModel
    assert classes.config_class is original.ToyTextConfig
    other = matching_classes(classes, migrated)
    assert other.base_class is migrated.ToyTextModel and other.config_class is migrated.ToyTextConfig


def test_a_model_that_only_wraps_another_is_no_base_model():
    module = _module("cm_toy_pair_wrapper_only")
    del module.ToyTextModel.forward  # the text model no longer takes a past: only the wrapper does
    with pytest.raises(LookupError, match="no base model"):
        discover(module)


def test_when_no_config_builds_a_class_the_lookup_error_says_why():
    module = _module("cm_toy_pair_unbuildable")
    module.ToyTextConfig.__init__ = transformers.PretrainedConfig.__init__  # no sizes: nothing builds
    with pytest.raises(LookupError, match="no tiny config builds .*ToyTextModel from ToyTextConfig: AttributeError"):
        discover(module)


def test_a_base_model_that_takes_encoder_states_is_driven_as_a_decoder():
    module = _module("cm_toy_pair_decoder")
    classes = discover(module)
    assert decoder_changes(classes) == {"is_decoder": True}
    (target,) = cross_targets(classes, classes)
    assert target.kind == "causal" and target.orig.model_class is module.ToyTextModel
    assert target.config_changes == {"is_decoder": True, "add_cross_attention": True}


def test_the_past_of_a_tuple_output_follows_a_pooled_output():
    module = _module("cm_toy_pair_tuple")
    config = tiny_config(module.ToyTextConfig)
    config.is_decoder = True
    model = module.ToyTextModel(config).eval()
    ids = torch.tensor([[1, 2, 3]])
    as_tuple = model(input_ids=ids, use_cache=True, return_dict=False)
    assert past(as_tuple) is as_tuple[2] and len(past(as_tuple)) == config.num_hidden_layers
    logits_and_past = (as_tuple[0], as_tuple[2])
    assert past(logits_and_past) is as_tuple[2]
    assert past((as_tuple[0], as_tuple[1])) is as_tuple[1]  # nothing after it: the entry after the first, as before


CHECKS = ["tuple_cache_stepwise", "return_dict_false", "cross_tuple_stepwise", "cross_generate"]


def _files(tmp_path, migrated_source: str):
    (tmp_path / "original.py").write_text(TOY)
    (tmp_path / "migrated.py").write_text(migrated_source)
    return tmp_path / "original.py", tmp_path / "migrated.py"


def test_the_probe_compares_the_text_model_of_a_file_without_a_head(tmp_path):
    results = {r.name: r for r in run_probe(*_files(tmp_path, TOY), checks=CHECKS)}
    assert {name: r.status for name, r in results.items()} == {
        "tuple_cache_stepwise": "pass",
        "return_dict_false": "pass",
        "cross_tuple_stepwise": "pass",
        "cross_generate": "skip",
    }, results
    assert "ToyTextModel is a base model" in results["cross_generate"].detail


def test_a_text_model_that_misreads_its_cached_cross_keys_diverges(tmp_path):
    """The migrated copy misreads its cached cross keys: wrong from the first cached step on."""
    broken = TOY.replace("key, value = past  # CROSS REUSE", "key, value = past[0] * 2, past[1]")
    assert broken != TOY
    results = {r.name: r.status for r in run_probe(*_files(tmp_path, broken), checks=CHECKS)}
    assert results["cross_tuple_stepwise"] == "fail"
    assert results["tuple_cache_stepwise"] == "pass"  # without encoder states the cross-attention never runs
