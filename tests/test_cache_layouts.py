"""The layout facts (cachemigrate.facts.layout, converters, boundary, conversions) on the layout fixtures of this repo and
small snippets: what each file's cache layout is read as, why an unknown one is unknown, and the views written."""

from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.facts.analysis import analyze
from cachemigrate.facts.boundary import file_layout
from cachemigrate.facts.conversions import Unconvertible, from_cache, to_cache
from cachemigrate.facts.converters import find_converters
from cachemigrate.rules.holes import find_facts
from cachemigrate.facts.layout import TensorLayout
from cachemigrate.rules.loader import load_ruleset
from cachemigrate.rules.file_views import FileViews

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "4.52"
ERA = load_ruleset("4.52").era


def layout_of(code: str):
    info = analyze(cst.parse_module(code), ERA.cache_names)
    views = FileViews(info)
    return file_layout(info, views, find_facts(info, ERA, views).get("presents")), info


def facts_of(fixture: str) -> dict:
    layout, _ = layout_of((FIXTURES / fixture).read_text())
    assert layout.reason is None, layout.reason
    return layout.facts


@pytest.mark.parametrize(
    "fixture, key_seq, value_seq",
    [
        ("CM300/before.py", "-1", "-2"),  # BLOOM: keys [b*h, d, s], values [b*h, s, d]
        ("CM300/rw_before.py", "-2", "-2"),  # Falcon inside: [b*h, s, d]
        ("CM300/batch_first_before.py", "-3", "-3"),  # [b, s, h, d], cat on dim 1
        ("CM300/sequence_first_before.py", "-4", "-4"),  # [s, b, h, d], cat on dim 0
    ],
)
def test_converted_pair_layouts_and_their_sequence_axes(fixture, key_seq, value_seq):
    facts = facts_of(fixture)
    assert facts["form"] == "pair" and facts["cache_layout"] == "converted"
    assert (facts["key_seq"], facts["value_seq"]) == (key_seq, value_seq)


def test_standard_pair_layout():
    facts = facts_of("CM304/before.py")  # MPT: [b, h, s, d], cat on dim 2 of a 4-D tensor
    assert facts == {
        "form": "pair",
        "cache_layout": "standard",
        "boundary": "standard",
        "key_seq": "-2",
        "value_seq": "-2",
        "boundary_key_seq": "-2",
        "stored_key_seq": "-2",
        "past_projection": "inline",
    }


def test_fused_layout_has_no_axis_facts():
    facts = facts_of("CM302/before.py")
    assert facts == {"form": "fused", "cache_layout": "fused", "boundary": "fused", "past_projection": "inline"}


def test_entry_and_exit_converters_give_the_boundary_layout():
    facts = facts_of("CM306/before.py")  # Falcon-like: merged inside, batch and heads apart at the boundary
    assert facts["cache_layout"] == "converted" and facts["boundary"] == "standard"
    assert facts["entry_converter"] == "self._convert_to_rw_cache"
    assert facts["exit_converter"] == "self._convert_cache_to_standard_format"


def test_converters_are_understood_by_what_they_do():
    info = analyze(cst.parse_module((FIXTURES / "CM306/before.py").read_text()), ERA.cache_names)
    found = find_converters(info)
    assert found["_convert_to_rw_cache"].kind == "merge"
    assert found["_convert_cache_to_standard_format"].kind == "split"
    # a function that copies the tensors is no converter
    info = analyze(cst.parse_module((FIXTURES / "CM311/not_a_converter_nomatch.py").read_text()), ERA.cache_names)
    assert find_converters(info) == {}


def test_a_fused_tensor_never_split_is_unknown_and_says_why():
    layout, _ = layout_of((FIXTURES / "CM302/fused_without_split_nomatch.py").read_text())
    assert layout.facts == {}
    assert "`key_value` holds keys and values fused, but is never split" in layout.reason


ATTENTION = """
import torch
from torch import nn


class DuoAttention(nn.Module):
    def forward(self, hidden_states, layer_past=None, use_cache=False):
        key = self.k(hidden_states)
        value = self.v(hidden_states)
        if layer_past is not None:
            key = torch.cat((layer_past[0], key), dim={dim})
            value = torch.cat((layer_past[1], value), dim=-2)
        return key @ value.transpose(-1, -2), (key, value)
"""


def test_a_positive_axis_on_a_tensor_of_unknown_rank_is_unknown():
    layout, _ = layout_of(ATTENTION.format(dim=1))
    assert layout.facts == {}
    assert "the rank of `key` is not known, so `dim=1`" in layout.reason


def test_keys_and_values_in_different_layouts_of_known_axes():
    layout, _ = layout_of(ATTENTION.format(dim=-1))
    assert layout.reason is None
    assert (layout.facts["key_seq"], layout.facts["value_seq"]) == ("-1", "-2")


@pytest.mark.parametrize(
    "layout, heads, into, back",
    [
        (TensorLayout(4, -2), None, "x", "x"),
        (TensorLayout(3, -1, "self.num_heads"), "self.num_heads", "x.unflatten(0, (-1, self.num_heads)).transpose(-1, -2)",
         "x.transpose(-1, -2).flatten(0, 1).contiguous()"),
        (TensorLayout(3, -2, "h"), "h", "x.unflatten(0, (-1, h))", "x.flatten(0, 1)"),
        (TensorLayout(4, -3), None, "x.transpose(1, 2)", "x.transpose(1, 2).contiguous()"),
        (TensorLayout(4, -4), None, "x.permute(1, 2, 0, 3)", "x.permute(2, 0, 1, 3).contiguous()"),
        (TensorLayout(None, -1), None, "x.transpose(-1, -2)", "x.transpose(-1, -2).contiguous()"),
    ],
)  # fmt: skip
def test_views_to_the_cache_layout_and_back(layout, heads, into, back):
    assert to_cache("x", layout, heads) == into
    assert from_cache("x", layout) == back


def test_views_that_need_a_rank_or_heads_the_code_does_not_show():
    with pytest.raises(Unconvertible):
        to_cache("x", TensorLayout(None, -3), None)
    with pytest.raises(Unconvertible):
        to_cache("x", TensorLayout(3, -2, "self.num_heads"), None)


def _load(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"layout_fixture_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "rule, variant, attention, sequence_first",
    [
        ("CM300", "", "FinchAttention", False),
        ("CM300", "rw_", "WrenAttention", False),
        ("CM300", "batch_first_", "TernAttention", False),
        ("CM300", "sequence_first_", "PloverAttention", True),
        ("CM300", "merged_read_", "SiskinAttention", False),
        ("CM302", "", "GannetAttention", False),
    ],
)
def test_views_around_the_update_compute_what_the_concatenation_did(rule, variant, attention, sequence_first):
    """The attention of ``after`` with a DynamicCache gives, bit for bit and in the same memory order, the outputs
    and presents of ``before`` with tuples, over a prompt and one cached step."""
    import types

    torch = pytest.importorskip("torch")
    from transformers.cache_utils import DynamicCache

    before = getattr(_load(FIXTURES / rule / f"{variant}before.py"), attention)
    after = getattr(_load(FIXTURES / rule / f"{variant}after.py"), attention)
    config = types.SimpleNamespace(num_attention_heads=4, hidden_size=32, num_kv_heads=2)
    torch.manual_seed(0)
    old, new = before(config), after(config)
    new.load_state_dict(old.state_dict())
    new.layer_idx = 0
    shape = (lambda s: (s, 2, 32)) if sequence_first else (lambda s: (2, s, 32))
    prompt, step = torch.randn(shape(5)), torch.randn(shape(1))
    first = old(prompt, None, use_cache=True)
    second = old(step, first[1], use_cache=True)
    cache = DynamicCache()
    new_first = new(prompt, cache, use_cache=True)
    new_second = new(step, cache, use_cache=True)
    assert torch.equal(first[0], new_first[0]) and torch.equal(second[0], new_second[0])
    old_present = second[1] if isinstance(second[1], tuple) else (second[1],)
    new_present = new_second[1] if isinstance(new_second[1], tuple) else (new_second[1],)
    for expected, got in zip(old_present, new_present):
        assert torch.equal(expected, got) and expected.stride() == got.stride()


@pytest.mark.parametrize(
    "fixture, rules",
    [
        ("CM306/before.py", {"CM300", "CM306", "CM307", "CM018"}),  # Falcon-like: RW inside, converters at the model
        ("CM302/before.py", {"CM302", "CM309", "CM310", "CM312"}),  # GPTBigCode-like: fused, a list of presents
        ("CM304/before.py", {"CM002", "CM304", "CM305", "CM308", "CM018"}),  # MPT-like: len() test, zip loop
    ],
)
def test_a_whole_model_in_each_layout_migrates_and_a_second_run_finds_it_clean(fixture, rules):
    """The dynamic tier on the small models of the layout fixtures: no diagnostic (a fused file is not asked for
    the pair layout's return, CM018), and the migrated file is clean (the converters it keeps are no leftovers)."""
    from cachemigrate.engine import Options, migrate_source

    ruleset = load_ruleset("4.52")
    result = migrate_source((FIXTURES / fixture).read_text(), ruleset, Options(line_length=119), path=fixture)
    assert [str(d) for d in result.diagnostics] == []
    assert result.status == "migrated" and rules <= set(result.applied)
    again = migrate_source(result.migrated, ruleset, Options(line_length=119), path="migrated.py")
    assert again.status == "clean" and again.diagnostics == [] and again.migrated == result.migrated


KERNEL_ATTENTION = """
import torch
from torch import nn


class Attention(nn.Module):
    def forward(self, hidden, past_key_value=None, use_cache=False):
        key, value = self.kv(hidden)
        if past_key_value is not None:
{concatenation}
        present = (key.transpose(1, 2), value.transpose(1, 2)) if use_cache else None
        return hidden, present
"""


@pytest.mark.parametrize(
    "concatenation, standard",
    [
        (  # the past is stored [b, h, s, d] and moved to a flash kernel's [b, s, h, d] to be concatenated
            "            key = torch.cat((past_key_value[0].transpose(1, 2), key), dim=1)\n"
            "            value = torch.cat((past_key_value[1].transpose(1, 2), value), dim=1)",
            True,
        ),
        (
            "            past_key = past_key_value[0].transpose(1, 2)\n"
            "            past_value = past_key_value[1].transpose(1, 2)\n"
            "            key = torch.cat((past_key, key), dim=1)\n"
            "            value = torch.cat((past_value, value), dim=1)",
            True,
        ),
        (  # transposed, but concatenated on another axis: not the kernel layout; a past read through a swap of
            # axes, whose stored layout needs the rank of `key`, which the code does not show
            "            key = torch.cat((past_key_value[0].transpose(1, 2), key), dim=2)\n"
            "            value = torch.cat((past_key_value[1].transpose(1, 2), value), dim=2)",
            False,
        ),
    ],
)
def test_a_past_moved_to_the_kernel_layout_for_its_concatenation_is_stored_standard(concatenation, standard):
    """Bark's and BART's flash classes: the cache itself keeps [b, h, s, d] (a file with them migrates)."""
    from cachemigrate.facts.layout import Unknown, attention_layout
    from cachemigrate.views.ranks import RankScope

    code = KERNEL_ATTENTION.replace("{concatenation}", concatenation)
    info = analyze(cst.parse_module(code), ERA.cache_names)
    fn = info.functions["Attention.forward"]
    views = FileViews(info)
    if standard:
        layout = attention_layout(fn.node, views.of(fn.qualname), "past_key_value", RankScope)
        assert layout.form == "pair" and layout.standard
    else:
        with pytest.raises(Unknown, match="the rank of `key` is not known, so `dim=2`"):
            attention_layout(fn.node, views.of(fn.qualname), "past_key_value", RankScope)


def test_a_past_read_through_a_swap_of_axes_is_stored_with_them_swapped_back():
    """`past_key = layer_past[0].transpose(-2, -1)` concatenated on -1 (keys [b, h, d, s]): the attention converts
    (its keys are not a Cache's), the tuples the model takes and gives back are stored [b, h, s, d] (a Cache's)."""
    facts = facts_of("CM300/read_through_before.py")
    assert facts == {
        "form": "pair",
        "cache_layout": "converted",
        "boundary": "standard",
        "key_seq": "-1",
        "value_seq": "-2",
        "boundary_key_seq": "-2",
        "stored_key_seq": "-2",
        "past_projection": "inline",
    }


@pytest.mark.parametrize(
    "rank, seq, swap, stored",
    [
        (4, -1, (-2, -1), -2),  # keys [b, h, d, s] read back from [b, h, s, d]
        (None, -1, (-2, -1), -2),  # negative axes: no rank needed
        (4, -1, (2, 3), -2),  # positive axes with the rank shown
        (4, -2, (0, 1), -2),  # a swap that leaves the sequence where it is
        (3, -1, (1, 2), -2),  # [b*h, d, s] read back from [b*h, s, d]
    ],
)
def test_the_stored_sequence_axis_of_a_swapped_read(rank, seq, swap, stored):
    from cachemigrate.facts.past_reads import swapped_back

    assert swapped_back(rank, seq, False, swap, "key") == stored


def test_a_swapped_read_whose_axes_need_an_unknown_rank_is_said():
    from cachemigrate.facts.past_reads import swapped_back

    with pytest.raises(ValueError, match=r"read through `.transpose\(2, 3\)`, and the rank of the key is not known"):
        swapped_back(None, -1, False, (2, 3), "key")
    with pytest.raises(ValueError, match="merges batch and heads"):
        swapped_back(3, -1, True, (0, 2), "key")


def test_an_attention_that_only_reads_back_what_it_stored_takes_the_files_standard_layout():
    """ProphetNet-style: the cross-attention reuses its stored keys (`key = past[0]`) and never concatenates; the
    n-gram self-attention concatenates in the standard layout, which the whole file then has."""
    layout, _ = layout_of((FIXTURES / "CM216/before.py").read_text())
    assert layout.reason is None, layout.reason
    assert layout.facts["cache_layout"] == "standard"


def test_an_attention_that_only_reads_back_what_it_stored_does_not_follow_a_converted_layout():
    """With the self-attention's keys on another axis ([b, s, h, d], cat on dim 1), the stored-only attention's own
    tensors are not known to be in that layout: the file's layout is unknown, said at that attention."""
    code = (FIXTURES / "CM216/before.py").read_text()
    code = code.replace(
        "main_key = torch.cat((earlier_key, main_key), dim=2)", "main_key = torch.cat((earlier_key, main_key), dim=1)"
    )
    code = code.replace(
        "main_value = torch.cat((earlier_value, main_value), dim=2)",
        "main_value = torch.cat((earlier_value, main_value), dim=1)",
    )
    layout, _ = layout_of(code)
    assert layout.reason is not None and "in TernCrossAttention.forward" in layout.reason


def test_a_past_read_through_a_view_merging_batch_and_heads_is_stored_split_again():
    """`layer_past[0].view(bsz * self.n_heads, -1, self.d_head)` concatenated on dim 1, stored back as
    `k.view(bsz, self.n_heads, -1, self.d_head)`: the attention converts (it concatenates [b*h, s, d]); the tuples
    the model takes and gives back are [b, h, s, d], a Cache's layout."""
    facts = facts_of("CM300/merged_read_before.py")
    assert facts == {
        "form": "pair",
        "cache_layout": "converted",
        "boundary": "standard",
        "key_seq": "-2",
        "value_seq": "-2",
        "boundary_key_seq": "-2",
        "stored_key_seq": "-2",
        "past_projection": "inline",
    }


@pytest.mark.parametrize(
    "old, new, said",
    [
        (  # stored back merged: the layout the layer keeps is not the one the read splits
            "layer_past = (k.view(bsz, self.n_heads, -1, self.d_head), v.view(bsz, self.n_heads, -1, self.d_head))",
            "layer_past = (k, v)",
            "stores `k` back as nothing, not split again (`k.view(bsz, self.n_heads, -1, self.d_head)`)",
        ),
        (  # split in the other order: heads first
            "layer_past = (k.view(bsz, self.n_heads, -1, self.d_head), v.view(bsz, self.n_heads, -1, self.d_head))",
            "layer_past = (k.view(self.n_heads, bsz, -1, self.d_head), v.view(self.n_heads, bsz, -1, self.d_head))",
            "as `k.view(self.n_heads, bsz, -1, self.d_head)`, not split again",
        ),
        (  # a product of two sizes neither of which is read off a tensor: which one is the heads is not shown
            "earlier_k = layer_past[0].view(bsz * self.n_heads, -1, self.d_head)",
            "earlier_k = layer_past[0].view(self.d_head * self.n_heads, -1, self.d_head)",
            "which factor of `self.d_head * self.n_heads` is the heads cannot be told",
        ),
    ],
)
def test_a_merged_read_whose_stored_layout_the_code_does_not_show_is_said(old, new, said):
    code = (FIXTURES / "CM300/merged_read_before.py").read_text()
    assert old in code
    layout, _ = layout_of(code.replace(old, new))
    assert layout.reason is not None and said in layout.reason, layout.reason


def test_a_stored_only_attention_follows_a_merged_read_stored_standard():
    """ProphetNet 4.6's spelling: the n-gram self-attention reads its past through `.view(batch * heads, -1,
    head_dim)` and stores it back split again, [b, h, s, d]; the cross-attention that only reads back what it stored
    keeps that layout, a Cache's, so the file's layout is known."""
    code = (FIXTURES / "CM216/before.py").read_text()
    standard = """        if past_key_value is not None:
            earlier_key = past_key_value[0]
            main_key = torch.cat((earlier_key, main_key), dim=2)
            earlier_value = past_key_value[1]
            main_value = torch.cat((earlier_value, main_value), dim=2)
        past_key_value = (main_key, main_value)
"""
    merged = """        merged, split = (batch_size * self.heads, -1, self.head_dim), (batch_size, self.heads, -1, self.head_dim)
        main_key, main_value = main_key.reshape(*merged), main_value.reshape(*merged)
        if past_key_value is not None:
            earlier_key = past_key_value[0].view(batch_size * self.heads, -1, self.head_dim)
            main_key = torch.cat((earlier_key, main_key), dim=1)
            earlier_value = past_key_value[1].view(batch_size * self.heads, -1, self.head_dim)
            main_value = torch.cat((earlier_value, main_value), dim=1)
        past_key_value = (
            main_key.view(batch_size, self.heads, -1, self.head_dim),
            main_value.view(batch_size, self.heads, -1, self.head_dim),
        )
        main_key, main_value = main_key.view(*split), main_value.view(*split)
"""
    assert standard in code
    layout, _ = layout_of(code.replace(standard, merged))
    assert layout.reason is None, layout.reason
    assert layout.facts["cache_layout"] == "converted" and layout.facts["stored_key_seq"] == "-2"
    assert layout.facts["boundary"] == "standard"
