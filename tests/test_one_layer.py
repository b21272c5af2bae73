"""One-layer stacks (issue 18): a draft model whose single layer is an attribute, not an ``nn.ModuleList``, handed
``past_key_values[0]`` (``fixtures/heads/draft_one_layer``), is the base model of its file: its layer is layer 0, it
makes the Cache and hands its layer the whole Cache. It migrates in every era, bit for bit on 4.51.3, and through
the cross-version probe on 4.57.6 / 5.25.0 (``runtimes``). Near-misses are refused at the read, saying why."""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.facts.analysis import analyze
from cachemigrate.rules.loader import load_ruleset

DRAFT = Path(__file__).resolve().parent.parent / "fixtures" / "heads" / "draft_one_layer" / "modeling_draft.py"
ERAS = ("4.52", "4.56", "5", "portable")
RUNTIMES = {
    "4.56": os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"),
    "5": os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"),
}


@functools.cache
def ruleset(era: str):
    return load_ruleset(era)


def migrate(code: str, era: str):
    return migrate_source(code, ruleset(era), Options(line_length=119), path=DRAFT.name)


def test_the_single_layer_model_is_the_base_model():
    info = analyze(cst.parse_module(DRAFT.read_text()), ruleset("4.52").era.cache_names)
    assert info.classes["DraftModel"].single_layers == {"layer": "DraftLayer"}
    assert info.roles["base_model"] == ["DraftModel"]
    assert (info.roles["block"], info.roles["attention"]) == (["DraftLayer"], ["DraftAttention"])


@pytest.mark.parametrize("era", ERAS)
def test_the_draft_model_migrates_in_every_era(era):
    result = migrate(DRAFT.read_text(), era)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    new = result.migrated
    assert "self.layer = DraftLayer(config, layer_idx=0)  # the draft's one layer" in new
    assert "key, value = layer_past.update(key, value, self.layer_idx)" in new
    assert "        layer_past = past_key_values\n" in new  # the whole Cache, for its only layer
    assert "presents = past_key_values if use_cache else None" in new
    # the Cache goes back as tuples right after the layer ran (where a list of blocks has its loop)
    lines = new.splitlines()
    call = lines.index("        hidden_states, present = self.layer(")
    assert lines[call + 3] == "        if return_legacy_cache and presents is not None:"


def _load_pair(era: str, tmp_path: Path):
    import torch

    from cachemigrate.probe.loading import load_modeling_module

    shutil.copytree(DRAFT.parent, tmp_path / era)
    (tmp_path / era / DRAFT.name).write_text(migrate(DRAFT.read_text(), era).migrated)
    modules = [load_modeling_module(DRAFT), load_modeling_module(tmp_path / era / DRAFT.name)]
    torch.manual_seed(0)
    original = modules[0].DraftForCausalLM(modules[0].DraftConfig()).eval()
    new = modules[1].DraftForCausalLM(modules[1].DraftConfig()).eval()
    new.load_state_dict(original.state_dict())
    return original, new


@pytest.mark.parametrize("era", ["4.52", "portable"])
def test_on_4_51_3_the_migrated_draft_gives_the_originals_tensors_bit_for_bit(era, tmp_path):
    """Tuples in give the original's tuples out; a DynamicCache in is the same object, grown, holding the original's
    tensors; greedy and beam generate() give the original's tokens."""
    import torch
    from transformers.cache_utils import DynamicCache

    original, new = _load_pair(era, tmp_path)
    prompt = torch.tensor([[5, 9, 13, 2, 7], [3, 3, 8, 1, 4]])
    with torch.no_grad():
        a, b = original(input_ids=prompt, use_cache=True), new(input_ids=prompt, use_cache=True)
        cache = DynamicCache()
        c = new(input_ids=prompt, past_key_values=cache, use_cache=True)
        for _ in range(3):
            assert torch.equal(a.logits, b.logits) and torch.equal(a.logits, c.logits)
            [(key, value)] = a.past_key_values
            [(new_key, new_value)] = b.past_key_values
            assert torch.equal(key, new_key) and torch.equal(value, new_value)
            assert c.past_key_values is cache and torch.equal(cache.key_cache[0], key)
            token = a.logits[:, -1:].argmax(-1)
            a = original(input_ids=token, past_key_values=a.past_key_values, use_cache=True)
            b = new(input_ids=token, past_key_values=b.past_key_values, use_cache=True)
            c = new(input_ids=token, past_key_values=cache, use_cache=True)
        for beams in (1, 3):
            kwargs = {"max_new_tokens": 6, "do_sample": False, "num_beams": beams, "pad_token_id": 0}
            assert torch.equal(original.generate(prompt, **kwargs), new.generate(prompt, **kwargs))


@pytest.mark.runtimes
@pytest.mark.parametrize(
    "era,runtime", [("4.56", "4.56"), ("5", "5"), ("portable", "4.56"), ("portable", "5")], ids=lambda v: v
)
def test_the_cross_version_probe_passes_bit_for_bit(era, runtime, tmp_path):
    from cachemigrate.probe.cross import run_cross_probe
    from cachemigrate.probe.report import PASS, SKIP

    python = Path(RUNTIMES[runtime])
    if not python.is_file():
        pytest.skip(f"no interpreter at {python}")
    shutil.copytree(DRAFT.parent, tmp_path / era)
    migrated = tmp_path / era / DRAFT.name
    migrated.write_text(migrate(DRAFT.read_text(), era).migrated)
    report = run_cross_probe(DRAFT, migrated, migrated_python=str(python), timeout=300)
    statuses = {r.name: r.status for r in report.results}
    assert set(statuses.values()) <= {PASS, SKIP}, [(r.name, r.status, r.detail) for r in report.results]
    for check in ("tuple_in_tuple_out", "cache_in_same_cache", "use_cache_false_with_past", "generate_beam"):
        assert statuses[check] == PASS, (check, statuses)
    assert report.max_abs_diff == 0.0, report.header()


@pytest.mark.parametrize(
    "old,new,missing",
    [
        ("layer_past = past_key_values[0] if", "layer_past = past_key_values[-1] if", "not the past's first entry"),
        ("class DraftModel(DraftPreTrainedModel):", "class DraftModel(nn.Module):", "it is no PreTrainedModel"),
    ],
)
def test_a_near_miss_is_refused_at_the_read_saying_what_is_missing(old, new, missing):
    code = DRAFT.read_text().replace(old, new)
    result = migrate(code, "4.56")
    assert result.status == "failed" and result.migrated == code
    [diagnostic] = result.diagnostics
    assert diagnostic.code == "CM903" and missing in diagnostic.message
    assert "to its single layer `self.layer` (DraftLayer)" in diagnostic.message
    line = code.splitlines()[diagnostic.line - 1]
    assert "layer_past = past_key_values[" in line
