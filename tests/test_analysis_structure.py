"""Structural analysis on constructs real files contain (no crash, the right roles)."""

from __future__ import annotations

import textwrap

import libcst as cst

from cachemigrate.analysis import analyze


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
