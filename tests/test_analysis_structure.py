"""Structural analysis on constructs real files contain (no crash, the right roles)."""

from __future__ import annotations

import textwrap

import libcst as cst

from cachemigrate.facts.analysis import analyze


def test_an_empty_tuple_assigned_to_an_attribute_in_init_is_not_a_crash():
    code = textwrap.dedent("""
        class Blocks(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.skipped = ()
                self.pair = (Attention(config), None)
                self.attn = (Attention)(config)
        """)
    info = analyze(cst.parse_module(code), ["past_key_value"])
    assert info.classes["Blocks"].submodules == {"attn": "Attention"}


def test_a_module_list_started_empty_with_a_list_literal_and_appended_to_holds_its_layers():
    """GPTSAN: `self.blocks = torch.nn.ModuleList([])`, then `self.blocks.append(Block(config))` in loops: the
    model is the container of its blocks (the base model), not an attention that reads the cache as a tuple."""
    code = textwrap.dedent("""
        class Attention(nn.Module):
            def forward(self, hidden_states, past_key_value=None):
                key = torch.cat([past_key_value[0], hidden_states], dim=2)
                return key, (key, key)

        class Block(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.attn = Attention(config)

            def forward(self, hidden_states, past_key_value=None):
                return self.attn(hidden_states, past_key_value=past_key_value)

        class Model(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.blocks = torch.nn.ModuleList([])
                for _ in range(config.n_layers):
                    self.blocks.append(Block(config))

            def forward(self, hidden_states, past_key_values=None):
                length = past_key_values[0][0].shape[2] if past_key_values is not None else 0
                for i in range(len(self.blocks)):
                    hidden_states, _ = self.blocks[i](hidden_states, past_key_values[i])
                return hidden_states
        """)
    info = analyze(cst.parse_module(code), ["past_key_value", "past_key_values"])
    assert info.classes["Model"].module_lists == {"blocks": "Block"}
    assert info.roles["base_model"] == ["Model"] and info.roles["attention"] == ["Attention"]
    filled = code.replace("torch.nn.ModuleList([])", "torch.nn.ModuleList([Block(config)])")
    assert analyze(cst.parse_module(filled), ["past_key_value", "past_key_values"]).roles["base_model"] == ["Model"]
