"""Files already on the Cache API are clean: the backward-compatible tuple code they keep (a reversed
``if not isinstance(x, Cache)`` guard, a tuple ``_reorder_cache``) is not a legacy use. Near-misses stay legacy."""

from __future__ import annotations

import textwrap

import pytest

from cachemigrate.engine import Options, migrate_source

ON_CACHE_API = textwrap.dedent("""
    import torch
    from torch import nn
    from ...cache_utils import Cache, DynamicCache
    from ...modeling_utils import PreTrainedModel


    class ToyAttention(nn.Module):
        def __init__(self, config, layer_idx):
            super().__init__()
            self.layer_idx = layer_idx

        def forward(self, hidden_states, past_key_value=None):
            key, value = hidden_states, hidden_states
            if past_key_value is not None:
                key, value = past_key_value.update(key, value, self.layer_idx)
            return key + value, past_key_value


    class ToyModel(PreTrainedModel):
        def __init__(self, config):
            super().__init__(config)
            self.layers = nn.ModuleList([ToyAttention(config, i) for i in range(2)])

        def forward(self, hidden_states, past_key_values=None):
            past_length = (
                past_key_values[0][0].shape[2] if not isinstance(past_key_values, Cache)
                else past_key_values.get_seq_length()
            ) if past_key_values is not None else 0
            for layer in self.layers:
                hidden_states, past_key_values = layer(hidden_states, past_key_value=past_key_values)
            return hidden_states, past_key_values, past_length


    class ToyForCausalLM(ToyModel):
        @staticmethod
        def _reorder_cache(past_key_values, beam_idx):
            reordered_past = ()
            for layer_past in past_key_values:
                reordered_past += (tuple(s.index_select(0, beam_idx) for s in layer_past),)
            return reordered_past
    """)


def _migrate(code, ruleset):
    return migrate_source(code, ruleset, Options(line_length=119), path="modeling_toy.py")


def test_a_file_on_the_cache_api_with_a_tuple_reorder_and_a_reversed_guard_is_clean(ruleset_452):
    result = _migrate(ON_CACHE_API, ruleset_452)
    assert result.status == "clean", [str(d) for d in result.diagnostics]
    assert result.migrated == ON_CACHE_API and not result.diagnostics


@pytest.mark.parametrize(
    "old, new",
    [
        # the attention still concatenates tuples: half migrated, so not clean
        (
            "key, value = past_key_value.update(key, value, self.layer_idx)",
            "key = torch.cat((past_key_value[0], key), dim=-2)",
        ),
        # the guard the right way round reads a tuple where only a Cache comes
        ("if not isinstance(past_key_values, Cache)", "if isinstance(past_key_values, Cache)"),
    ],
)
def test_near_misses_of_a_cache_api_file_are_not_clean(ruleset_452, old, new):
    code = ON_CACHE_API.replace(old, new)
    assert code != ON_CACHE_API
    result = _migrate(code, ruleset_452)
    assert result.status != "clean"
    assert result.migrated == code or result.status == "migrated"


def test_a_tuple_reorder_alone_does_not_make_a_file_look_migrated(ruleset_452):
    """No Cache method is called anywhere: the tuple `_reorder_cache` is legacy code, reported."""
    code = ON_CACHE_API.replace("key, value = past_key_value.update(key, value, self.layer_idx)", "pass")
    code = code.replace("else past_key_values.get_seq_length()", "else 0")
    result = _migrate(code, ruleset_452)
    assert result.status == "failed"
    assert result.migrated == code
