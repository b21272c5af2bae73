"""Heads over a library model's stack of layers, in a file of transformers' own tree (a release's
``models/<name>/modeling_<name>.py`` or a copy of one): ``from ..wren.modeling_wren import WrenEncoder`` is the
library's, as it resolves when the file runs as a module of the installed transformers. Such a head migrates for era
4.52, whose runtimes' stacks take and give tuples as the file expects, and for era 4.56, where the head does around
the stack what the file's callers need of 4.54-4.57's stacks (CM113 hands it a Cache, an EncoderDecoderCache where
the layers hold cross-attention tensors; CM114 wraps a self-attention Cache when there are encoder states; CM116 gives
the past back as it was handed, and none where the stack was handed no ``use_cache``); it is refused at the line that
builds the stack for 5 and portable (CM113 of era 5), whose stacks give back neither hidden states nor attentions.
Proven across runtimes on a toy head over transformers' own ``BertEncoder`` (``runtimes``). The relative imports of a
user's own package are not the library. And: a tuple idiom that no rule rewrote because the file's layout is unknown
names the CM901 that says why (proof/blocked.py)."""

from __future__ import annotations

import functools
import textwrap

import libcst as cst
import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.facts.analysis import analyze
from cachemigrate.rules.loader import load_ruleset

STACK_HEAD = textwrap.dedent(
    '''
    import torch
    from torch import nn

    from ...modeling_utils import PreTrainedModel
    from ..wren.modeling_wren import WrenEncoder


    class HeronPreTrainedModel(PreTrainedModel):
        base_model_prefix = "heron"


    class HeronModel(HeronPreTrainedModel):
        def __init__(self, config):
            super().__init__(config)
            self.tokens = nn.Embedding(config.vocab_size, config.hidden_size)
            self.encoder = WrenEncoder(config)

        def forward(self, input_ids, past_key_values=None, use_cache=None):
            past_length = past_key_values[0][0].shape[2] if past_key_values is not None else 0
            hidden = self.tokens(input_ids) * (1 + past_length)
            outputs = self.encoder(hidden, past_key_values=past_key_values, use_cache=use_cache)
            return outputs


    class HeronForCausalLM(HeronPreTrainedModel):
        def __init__(self, config):
            super().__init__(config)
            self.heron = HeronModel(config)
            self.head = nn.Linear(config.hidden_size, config.vocab_size)

        def forward(self, input_ids, past_key_values=None, use_cache=None):
            outputs = self.heron(input_ids, past_key_values=past_key_values, use_cache=use_cache)
            return self.head(outputs[0]), outputs[1]

        def prepare_inputs_for_generation(self, input_ids, past_key_values=None, **kwargs):
            if past_key_values is not None:
                input_ids = input_ids[:, -1:]
            return {"input_ids": input_ids, "past_key_values": past_key_values}

        def _reorder_cache(self, past_key_values, beam_idx):
            return tuple(tuple(t.index_select(0, beam_idx) for t in layer) for layer in past_key_values)
    '''
).lstrip()


@functools.cache
def ruleset(era: str):
    return load_ruleset(era)


def migrate(code: str, era: str):
    return migrate_source(code, ruleset(era), Options(line_length=119), path="modeling_heron.py")


def _line(code: str, text: str) -> int:
    [line] = [n for n, line in enumerate(code.splitlines(), 1) if text in line]
    return line


def test_a_stack_of_another_model_of_the_tree_is_a_library_head():
    info = analyze(cst.parse_module(STACK_HEAD), ruleset("4.52").era.cache_names)
    [head] = info.library_heads
    assert (head.name, head.attribute, head.model, head.module, head.stack) == (
        "HeronModel",
        "encoder",
        "WrenEncoder",
        "transformers.models.wren.modeling_wren",
        True,
    )
    assert info.roles["library_pretrained"] == ["HeronPreTrainedModel"]
    # the causal head over the file's own model generates: it is a head (GenerationMixin, its hooks)
    assert "HeronForCausalLM" in info.roles["head"]


def test_for_era_4_52_it_migrates_reading_the_past_length_from_a_cache():
    result = migrate(STACK_HEAD, "4.52")
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    new = result.migrated
    flat = " ".join(new.split())
    assert "past_key_values.get_seq_length() if isinstance(past_key_values, Cache) else past_key_values[0][0]" in flat
    assert "class HeronForCausalLM(HeronPreTrainedModel, GenerationMixin):" in new
    # the file claims no Cache: on 4.42-4.53 its generate() hands it tuples, which those releases' stacks take
    assert "_supports_cache_class" not in new


def test_for_era_4_56_it_hands_the_stack_a_cache_and_gives_the_past_back_as_handed():
    result = migrate(STACK_HEAD, "4.56")
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    assert set(result.applied) >= {"CM113", "CM116", "CM112"} and "CM109" not in result.applied
    flat = " ".join(result.migrated.split())
    # a tuple becomes the Cache the stack's attention reads: its cross-attention part where the layers hold four
    assert (
        "if any(len(layer) > 2 for layer in past_key_values): "
        "past_key_values = EncoderDecoderCache.from_legacy_cache(past_key_values) "
        "else: past_key_values = DynamicCache.from_legacy_cache(past_key_values)"
    ) in flat
    # the head takes no encoder states: nothing to wrap (CM114)
    assert "CM114" not in result.applied and "EncoderDecoderCache(past_key_values, DynamicCache())" not in flat
    # what the call hands the stack as `use_cache` decides whether a past goes back at all
    assert "outputs = stack_past_as_handed(outputs, return_legacy_cache, use_cache)" in flat


def test_the_past_goes_back_by_what_the_call_hands_the_stack_as_use_cache():
    code = STACK_HEAD.replace(
        "outputs = self.encoder(hidden, past_key_values=past_key_values, use_cache=use_cache)",
        "outputs = self.encoder(hidden, past_key_values=past_key_values, use_cache=True)",
    )
    assert code != STACK_HEAD
    assert "stack_past_as_handed(outputs, return_legacy_cache, True)" in migrate(code, "4.56").migrated
    code = STACK_HEAD.replace(", use_cache=use_cache)\n        return outputs", ")\n        return outputs")
    assert code != STACK_HEAD
    assert "stack_past_as_handed(outputs, return_legacy_cache, None)" in migrate(code, "4.56").migrated


def test_a_stack_heads_call_that_binds_nothing_is_refused_saying_what_to_write():
    code = STACK_HEAD.replace(
        "outputs = self.encoder(hidden, past_key_values=past_key_values, use_cache=use_cache)\n        return outputs",
        "return self.encoder(hidden, past_key_values=past_key_values, use_cache=use_cache)",
    )
    assert code != STACK_HEAD
    result = migrate(code, "4.56")
    assert result.status == "failed" and result.migrated == code
    assert any("CM116" in d.message and "outputs = self.transformer(...)" in d.message for d in result.diagnostics)


@pytest.mark.parametrize("era", ["5", "portable"])
def test_eras_of_transformers_5_refuse_it_at_the_line_that_builds_the_stack(era):
    result = migrate(STACK_HEAD, era)
    assert result.status == "failed" and result.migrated == STACK_HEAD
    assert [d.code for d in result.diagnostics] == ["CM113"]
    [refusal] = result.diagnostics
    assert refusal.line == _line(STACK_HEAD, "self.encoder = WrenEncoder(config)")
    message = refusal.message
    assert "WrenEncoder" in message and "`transformers.models.wren.modeling_wren`" in message
    assert "only `last_hidden_state` and `cache`" in message and "capture_outputs" in message
    assert "era 4.56" in message and "copy the stack" in message


def test_a_users_own_package_above_the_file_is_not_the_library():
    code = STACK_HEAD.replace("from ..wren.modeling_wren import WrenEncoder", "from ..layers.stack import WrenEncoder")
    info = analyze(cst.parse_module(code), ruleset("4.52").era.cache_names)
    assert info.library_heads == []
    assert migrate(code, "4.52").status == "failed"


def test_a_relative_import_counts_only_for_a_head_not_for_the_tree_s_other_facts():
    from cachemigrate.facts.library_imports import library_names

    module = cst.parse_module(STACK_HEAD)
    assert "WrenEncoder" not in library_names(module)
    assert library_names(module, tree=True)["WrenEncoder"] == "transformers.models.wren.modeling_wren.WrenEncoder"
    assert library_names(module, tree=True)["PreTrainedModel"] == "transformers.modeling_utils.PreTrainedModel"


HIDDEN_STATES_PAST = textwrap.dedent(
    '''
    import torch
    from torch import nn


    class GlobalAttention(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.k = nn.Linear(width, width)
            self.v = nn.Linear(width, width)

        def forward(self, x, layer_past=None, use_cache=False):
            key, value = self.k(x)[:, None], self.v(x)[:, None]
            if layer_past is not None:
                past_key = layer_past[0]
                past_value = layer_past[1]
                key = torch.cat((past_key, key), dim=-2)
                value = torch.cat((past_value, value), dim=-2)
            present = (key, value) if use_cache else None
            return (value.mean(1), present)


    class LocalAttention(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.k = nn.Linear(width, width)

        def forward(self, x, layer_past=None, use_cache=False):
            if layer_past is not None:
                states = torch.cat([layer_past[0], x], dim=1)
            else:
                states = x
            present = (states,) if use_cache else None
            return (self.k(states)[:, -x.shape[1]:], present)


    class Block(nn.Module):
        def __init__(self, width, local):
            super().__init__()
            self.attn = LocalAttention(width) if local else GlobalAttention(width)

        def forward(self, x, layer_past=None, use_cache=False):
            return self.attn(x, layer_past=layer_past, use_cache=use_cache)


    class TinyModel(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.h = nn.ModuleList([Block(width, i % 2 == 1) for i in range(2)])

        def forward(self, x, past_key_values=None, use_cache=False):
            if past_key_values is None:
                past_key_values = tuple([None] * len(self.h))
            presents = () if use_cache else None
            for block, layer_past in zip(self.h, past_key_values):
                x, present = block(x, layer_past=layer_past, use_cache=use_cache)
                if use_cache:
                    presents = presents + (present,)
            return x, presents
    '''
).lstrip()


def test_an_idiom_left_because_the_layout_is_unknown_names_the_blocker():
    result = migrate(HIDDEN_STATES_PAST, "4.52")
    assert result.status == "failed"
    [blocker] = [d for d in result.diagnostics if d.code == "CM901"]
    assert blocker.line == _line(HIDDEN_STATES_PAST, "states = torch.cat([layer_past[0], x], dim=1)")
    assert "holds the states the layer was given" in blocker.message
    left = [d for d in result.diagnostics if d.code == "CM900"]
    assert left and all(f"the CM901 at line {blocker.line} says why" in d.message for d in left)
    assert any(d.line == _line(HIDDEN_STATES_PAST, "past_key = layer_past[0]") for d in left)
