"""Roles and structure found by cachemigrate.facts.analysis on small inline sources."""

import textwrap

import libcst as cst

from cachemigrate.facts.analysis import analyze

NAMES = ("layer_past", "past_key_value", "past_key_values", "past")


def info_of(source: str):
    return analyze(cst.parse_module(textwrap.dedent(source)), NAMES)


ATTENTION = """
class Attn(nn.Module):
    def forward(self, x, layer_past=None):
        k = torch.cat((layer_past[0], x), dim=-2)
        return k


class FlashAttn(Attn):
    def forward(self, x, layer_past=None):
        k = torch.cat((layer_past[0], x), dim=-2)
        return k
"""


def test_an_attention_chosen_by_a_conditional_or_a_table_makes_the_block():
    for build in (
        "if flash:\n            self.attn = FlashAttn(config)\n        else:\n            self.attn = Attn(config)",  # BigBird
        "self.attn = Attn(config) if not flash else FlashAttn(config)",
        "self.attn = (Attn if not flash else FlashAttn)(config)",
        "self.attn = CLASSES[config._attn_implementation](config)",
    ):
        source = ATTENTION + f"""
CLASSES = {{"eager": Attn, "flash": FlashAttn}}


class Block(nn.Module):
    def __init__(self, config):
        {build}

    def forward(self, x, layer_past=None):
        return self.attn(x, layer_past=layer_past)
"""
        info = info_of(source)
        assert info.roles["block"] == ["Block"], build
        assert set(info.classes["Block"].choices["attn"]) == {"Attn", "FlashAttn"}, build


def test_an_attention_built_in_one_branch_of_init_and_a_non_caching_module_in_another_makes_the_block():
    """BigBird: `if full: self.self = SelfAttention(config)` / `elif sparse: self.self = SparseAttention(...)`; the
    last branch takes no cache, the first does: the holder is still a block, and both classes are kept."""
    source = ATTENTION + """

class Sparse(nn.Module):
    def forward(self, x):
        return x


class Block(nn.Module):
    def __init__(self, config):
        if config.full:
            self.attn = Attn(config)
        elif config.sparse:
            self.attn = Sparse()
        else:
            raise ValueError(config)

    def forward(self, x, layer_past=None):
        return self.attn(x, layer_past=layer_past)
"""
    info = info_of(source)
    assert info.roles["block"] == ["Block"]
    assert info.classes["Block"].choices["attn"] == ["Attn", "Sparse"]
    assert info.classes["Block"].submodules["attn"] == "Attn"


def test_blocks_are_found_through_a_wrapper_around_the_attention():
    source = ATTENTION + """

class Wrapper(nn.Module):
    def __init__(self, config):
        self.attention = Attn(config)

    def forward(self, x, layer_past=None):
        return self.attention(x, layer_past=layer_past)


class Block(nn.Module):
    def __init__(self, config):
        self.attn = Wrapper(config)

    def forward(self, x, layer_past=None):
        return self.attn(x, layer_past=layer_past)


class Model(PreTrained):
    def __init__(self, config):
        self.h = nn.ModuleList([Block(config) for i in range(3)])

    def forward(self, x, past_key_values=None):
        return x
"""
    info = info_of(source)
    assert info.roles["block"] == ["Wrapper", "Block"]
    assert info.roles["base_model"] == ["Model"]


def test_an_empty_tuple_assigned_in_init_is_not_a_submodule():
    """A regression of the 5.24 robustness run (emu3): `()` has no parentheses to take off."""
    info = info_of("""
class Thing(nn.Module):
    def __init__(self, config):
        self.sizes = ()
        self.more = (())
""")
    assert info.classes["Thing"].submodules == {}
