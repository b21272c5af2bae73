"""An encoder-decoder model whose block keeps its parts in a ``ModuleList`` filled by ``.append``, whose stack (a
``PreTrainedModel`` subclass) serves as encoder and decoder, whose layer past is a 4-tuple (self keys, self values,
cross keys, cross values), whose attention hands ``past[0]`` / ``past[1]`` to a projection helper nested in its
forward, and whose relative position bias reads the past length (``fixtures/encdec/projhelper``, written for this
repo): the facts, the migration in every era, and the original's tensors bit for bit on the installed runtime."""

from __future__ import annotations

import functools
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.facts.analysis import analyze
from cachemigrate.facts.boundary import file_layout
from cachemigrate.rules.file_views import FileViews
from cachemigrate.rules.holes import find_facts
from cachemigrate.rules.loader import load_ruleset

FOLDER = Path(__file__).resolve().parent.parent / "fixtures" / "encdec" / "projhelper"
MODELING = FOLDER / "modeling_projhelper.py"
ERAS = ("4.52", "4.56", "5", "portable")


@functools.cache
def ruleset(era: str):
    return load_ruleset(era)


def migrate(code: str, era: str):
    return migrate_source(code, ruleset(era), Options(line_length=119), path=str(MODELING))


def _line(code: str, text: str) -> int:
    [line] = [n for n, line in enumerate(code.splitlines(), 1) if text in line]
    return line


# -- facts ------------------------------------------------------------------------------------------------------


def test_a_block_with_appended_parts_is_a_block_and_the_stack_is_the_base_model():
    info = analyze(cst.parse_module(MODELING.read_text()), ruleset("4.52").era.cache_names)
    assert info.roles["attention"] == ["HelperAttention"]
    assert set(info.roles["block"]) == {"SelfPart", "CrossPart", "HelperBlock"}
    assert info.roles["base_model"] == ["HelperStack"]
    assert info.roles["pretrained"] == ["HelperPreTrainedModel"]
    assert info.roles["head"] == ["HelperForConditionalGeneration"]
    block = info.classes["HelperBlock"]
    assert block.module_lists == {} and block.class_aliases == {"self_part": ["SelfPart", "EncoderSelfPart"]}
    assert block.choices["layer"] == ["SelfPart", "EncoderSelfPart", "CrossPart", "FeedForwardPart"]
    assert info.classes["HelperStack"].module_lists == {"block": "HelperBlock"}


def test_listed_parts_are_a_block_and_a_stack_appended_in_a_loop_stays_a_stack():
    code = """
class Block(nn.Module):
    def __init__(self, config):
        self.parts = nn.ModuleList([SelfPart(config), Feed(config)])
        self.more = nn.ModuleList()
        for _ in range(2):
            self.more.append(Layer(config))
"""
    info = analyze(cst.parse_module(code), ["past_key_value"])
    assert info.classes["Block"].choices["parts"] == ["SelfPart", "Feed"]
    assert info.classes["Block"].module_lists == {"more": "Layer"}


def test_a_nested_helper_parameter_named_like_the_cache_is_not_the_cache():
    info = analyze(cst.parse_module(MODELING.read_text()), ruleset("4.52").era.cache_names)
    legacy = [u.idiom for u in info.functions["HelperAttention.forward"].legacy()]
    assert "torch.cat([past_key_value, states], dim=2)" not in legacy
    assert legacy.count("past_key_value[0]") == 2 and legacy.count("past_key_value[1]") == 1


def test_the_four_tuple_is_the_encoder_decoder_layout_and_the_helper_gives_the_layout():
    module = cst.parse_module(MODELING.read_text())
    era = ruleset("4.52").era
    info = analyze(module, era.cache_names)
    views = FileViews(info)
    facts = find_facts(info, era, views)
    layout = file_layout(info, views, facts.get("presents"))
    assert facts["cache_kind"] == "encoder_decoder"
    assert layout.reason is None
    assert layout.facts["past_projection"] == "helper"
    assert layout.facts["cache_layout"] == "standard" and layout.facts["key_seq"] == "-2"


# -- migration per era ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
def test_the_model_migrates_in_every_era_with_the_api_its_runtime_has(era):
    result = migrate(MODELING.read_text(), era)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    new = result.migrated
    assert "past_key_value.update(key_states, value_states, self.layer_idx)" in new
    assert "encoder_decoder_cache.is_updated[self.layer_idx] = True" in new
    assert "past_key_value.get_seq_length(self.layer_idx)" in new  # the position bias reads the cache
    assert "layer_idx=i)" in new and "self.layer_idx = layer_idx" in new
    # the part the block builds through `self_part` gets the index, and so does the class that local may hold instead
    assert "self.layer.append(self_part(config, has_bias_table=has_bias_table, layer_idx=layer_idx))" in new
    encoder_part = new[new.index("class EncoderSelfPart") : new.index("class CrossPart")]
    assert "def __init__(self, config, has_bias_table=False, layer_idx=None):" in encoder_part
    assert "self.layer_idx" not in encoder_part and "layer_idx=layer_idx" not in encoder_part
    reads = {
        "4.52": "past_key_value.key_cache[self.layer_idx]",
        "4.56": "past_key_value.layers[self.layer_idx].keys",
        "5": "past_key_value.layers[self.layer_idx].keys",
        "portable": "cache_layer_keys(past_key_value, self.layer_idx)",
    }
    assert reads[era] in new
    if era in ("5", "portable"):
        assert "from_legacy_cache" not in new and "past_key_value.key_cache" not in new
        assert "self_layer.keys, self_layer.values, cross_layer.keys, cross_layer.values" in new
    else:
        assert "EncoderDecoderCache.from_legacy_cache(past_key_values)" in new


def test_a_helper_handed_the_past_by_keyword_is_refused_at_the_attention_with_the_reason():
    code = MODELING.read_text().replace(
        "hidden_states, self.v, key_value_states, past_key_value[1] if past_key_value is not None else None",
        "hidden_states, self.v, key_value_states, past_key_value=past_key_value[1] if past_key_value is not None "
        "else None",
    )
    result = migrate(code, "4.52")
    assert result.status == "failed" and result.migrated == code
    [layout] = [d for d in result.diagnostics if d.code == "CM901"]
    assert layout.line == _line(code, "key_states = project(")
    assert "`project(...)` is handed `past_key_value[0]` as its argument 4, but the keys" in layout.message


# -- the original's tensors, bit for bit (era 4.52 on the installed 4.51.3) --------------------------------------


def _models(tmp_path):
    import shutil

    import torch

    from cachemigrate.probe import unload_module
    from cachemigrate.probe.loading import load_modeling_module

    migrated = tmp_path / "projhelper"
    shutil.copytree(FOLDER, migrated)
    result = migrate(MODELING.read_text(), "4.52")
    (migrated / MODELING.name).write_text(result.migrated)
    pair = []
    for folder in (FOLDER, migrated):
        module = load_modeling_module(folder / MODELING.name)
        try:
            torch.manual_seed(0)
            pair.append(module.HelperForConditionalGeneration(module.ProjHelperConfig()).eval())
        finally:
            unload_module(module)  # no probe module left for the tests after this one
    pair[1].load_state_dict(pair[0].state_dict())
    return pair


def test_migrated_for_4_52_gives_the_original_tensors_bit_for_bit(tmp_path):
    torch = pytest.importorskip("torch")
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    original, new = _models(tmp_path)
    generator = torch.Generator().manual_seed(1)
    source = torch.randint(2, 61, (2, 7), generator=generator)
    steps = [torch.randint(2, 61, (2, n), generator=generator) for n in (4, 1, 1, 1)]
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    with torch.no_grad():
        encoded = original.encoder(source)
        old_past = new_past = None
        for step in steps:
            before = original(
                decoder_input_ids=step, encoder_outputs=encoded, past_key_values=old_past, use_cache=True
            )
            after = new(decoder_input_ids=step, encoder_outputs=encoded, past_key_values=new_past, use_cache=True)
            given = new(decoder_input_ids=step, encoder_outputs=encoded, past_key_values=cache, use_cache=True)
            assert torch.equal(before.logits, after.logits) and torch.equal(before.logits, given.logits)
            assert isinstance(after.past_key_values, tuple) and given.past_key_values is cache
            for old_layer, new_layer in zip(before.past_key_values, after.past_key_values, strict=True):
                assert len(old_layer) == len(new_layer) == 4
                assert all(torch.equal(a, b) for a, b in zip(old_layer, new_layer))
            for i, old_layer in enumerate(before.past_key_values):
                assert torch.equal(cache.self_attention_cache.key_cache[i], old_layer[0])
                assert torch.equal(cache.cross_attention_cache.value_cache[i], old_layer[3])
            old_past, new_past = before.past_key_values, after.past_key_values
        cross = cache.cross_attention_cache.key_cache[0]
        new(decoder_input_ids=steps[-1], encoder_outputs=encoded, past_key_values=cache, use_cache=True)
        assert cache.cross_attention_cache.key_cache[0] is cross  # written once, then reused as it is
        assert cache.self_attention_cache.get_seq_length() == sum(s.shape[1] for s in steps) + 1


def test_a_past_length_read_after_the_concatenation_is_taken_before_the_update_or_refused_there():
    """The tuple is still the past alone after the concatenation, a Cache is not: CM006 takes the length from the
    cache before the statement that updates it. Where the function already uses the name it would take it into, the
    read is refused there with the reason."""
    zipped = MODELING.parent.parent.parent / "remote" / "zipped" / "modeling_zipped.py"
    cat = "            value_states = torch.cat([past_key_value[1], value_states], dim=2)\n"
    code = zipped.read_text()
    assert cat in code
    code = code.replace(cat, cat + "            grown = past_key_value[0].shape[2]\n")
    result = migrate_source(code, ruleset("4.52"), Options(line_length=119), path="modeling_zipped.py")
    assert result.status == "migrated" and "CM006" in result.applied, [str(d) for d in result.diagnostics]
    taken = "past_length = past_key_value.get_seq_length(self.layer_idx) if past_key_value is not None else 0\n"
    assert taken in result.migrated and "grown = past_length\n" in result.migrated
    assert result.migrated.index(taken) < result.migrated.index("past_key_value.update(")

    code = code.replace("            grown = past_key_value[0]", "            past_length = 1\n            grown = past_key_value[0]")
    result = migrate_source(code, ruleset("4.52"), Options(line_length=119), path="modeling_zipped.py")
    assert result.status == "failed" and result.migrated == code
    [refusal] = result.diagnostics
    assert (refusal.code, refusal.line) == ("CM900", _line(code, "grown = past_key_value[0].shape[2]"))
    assert "reads the past length (`past_key_value[0]` in `grown = past_key_value[0].shape[2]`) after it " in (
        refusal.message
    )
    assert f"line {_line(code, 'key_states = torch.cat([past_key_value[0], key_states], dim=2)')}" in refusal.message


# -- on transformers 5.x (tests marked `runtimes`, skipped where its venv is missing) ------------------------------


@pytest.mark.runtimes
def test_migrated_for_era_5_matches_the_original_on_transformers_5(tmp_path):
    import os
    import shutil

    from cachemigrate.probe.cross import run_cross_probe
    from cachemigrate.probe.report import PASS, SKIP

    python = Path(os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"))
    if not python.is_file():
        pytest.skip(f"no transformers 5.x interpreter at {python}")
    folder = tmp_path / "projhelper"
    shutil.copytree(FOLDER, folder)
    result = migrate(MODELING.read_text(), "5")
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    (folder / MODELING.name).write_text(result.migrated)
    report = run_cross_probe(MODELING, folder / MODELING.name, migrated_python=str(python), timeout=300)
    statuses = {r.name: r.status for r in report.results}
    assert report.migrated_transformers.startswith("5."), report.header()
    assert set(statuses.values()) <= {PASS, SKIP}, [(r.name, r.status, r.detail) for r in report.results]
    for check in ("cross_tuple_stepwise", "cross_cache_written_once", "cross_self_only_cache", "cross_generate"):
        assert statuses[check] == PASS, (check, statuses)
