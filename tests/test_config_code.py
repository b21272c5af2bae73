"""An attention's attribute as its model reads it off the config (cachemigrate/facts/config_code.py): the heads
factor a model must split a merged [batch*heads, ...] past with."""

from __future__ import annotations

import libcst as cst
import pytest

from cachemigrate.facts.config_code import NotFromConfig, model_code

INIT = cst.parse_module("""
def __init__(self, cfg, layer_idx=None):
    self.multi_query = cfg.multi_query
    self.heads = cfg.n_head
    self.num_kv = cfg.n_head if not self.multi_query else 1
    self.kv = cfg.n_head_kv if cfg.n_head_kv is not None else cfg.n_head
    self.groups = cfg.n_head + cfg.extra
    self.twice = self.groups * 2
    self.nested = cfg.attn.heads
    self.layer = layer_idx
    self.called = heads_of(cfg)
    self.other = self.unset
    if cfg.flag:
        self.branch = 1
""").body[0]


@pytest.mark.parametrize(
    "attribute, code",
    [
        ("self.heads", "self.config.n_head"),
        ("self.num_kv", "self.config.n_head if not self.config.multi_query else 1"),
        ("self.kv", "self.config.n_head_kv if self.config.n_head_kv is not None else self.config.n_head"),
        ("self.twice", "(self.config.n_head + self.config.extra) * 2"),
        ("self.nested", "self.config.attn.heads"),
    ],
)
def test_an_attribute_set_from_the_config_reads_the_same_in_the_model(attribute, code):
    assert model_code(INIT, attribute) == code


@pytest.mark.parametrize(
    "attribute, reason",
    [
        ("self.layer", "`self.layer` is set from `layer_idx`, and `layer_idx` is a name of the `__init__`"),
        ("self.called", "`self.called` is set from `heads_of(cfg)`, and `heads_of(cfg)` is not read off the config"),
        ("self.other", "`self.other` is set from `self.unset`, and `self.unset` is not set in the attention's"),
        ("self.branch", "`self.branch` is set more than once, or inside a block"),
        ("self.missing", "`self.missing` is not set in the attention's `__init__`"),
    ],
)
def test_what_is_not_read_off_the_config_is_named(attribute, reason):
    with pytest.raises(NotFromConfig) as raised:
        model_code(INIT, attribute)
    assert str(raised.value).startswith(reason)
