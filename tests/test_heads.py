"""Heads over library models (issue 18): a head that builds a model of the installed transformers and hands it the
past (``fixtures/heads/gpt2_prefix``: TTS-style, a conditioning prefix on the first step, its own
``prepare_inputs_for_generation`` and ``_reorder_cache``) migrates in every era; on 4.51.3 the migrated head gives the
original's tensors and tokens bit for bit, and on 4.57.6 / 5.25.0 it passes the cross-version probe (``runtimes``).
Near-misses are refused at their line, saying what is missing."""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.facts.analysis import analyze
from cachemigrate.rules.loader import load_ruleset

HEADS = Path(__file__).resolve().parent.parent / "fixtures" / "heads"
PREFIX = HEADS / "gpt2_prefix" / "modeling_gpt2_prefix.py"
ERAS = ("4.52", "4.56", "5", "portable")
RUNTIMES = {
    "4.56": os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"),
    "5": os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"),
}


@functools.cache
def ruleset(era: str):
    return load_ruleset(era)


def migrate(code: str, era: str, rules=None):
    return migrate_source(code, rules or ruleset(era), Options(line_length=119), path=PREFIX.name)


def _line(code: str, text: str) -> int:
    [line] = [n for n, line in enumerate(code.splitlines(), 1) if text in line]
    return line


# -- what the head is -------------------------------------------------------------------------------------------


def test_the_head_is_found_by_what_it_imports_builds_and_hands_the_past():
    info = analyze(cst.parse_module(PREFIX.read_text()), ruleset("4.52").era.cache_names)
    [head] = info.library_heads
    assert (head.name, head.attribute, head.model, head.module) == (
        "PrefixSpeechHead",
        "transformer",
        "GPT2Model",
        "transformers",
    )
    assert head.outputs == "outputs"
    assert info.roles["library_head"] == ["PrefixSpeechHead"] and "PrefixSpeechHead" in info.roles["head"]


@pytest.mark.parametrize(
    "imports, base, built",
    [
        ("from transformers import GPT2Model as Backbone, GPT2PreTrainedModel as Base", "Base", "Backbone"),
        ("import transformers", "transformers.GPT2PreTrainedModel", "transformers.GPT2Model"),
        ("from transformers.models.gpt2 import modeling_gpt2 as mg", "mg.GPT2PreTrainedModel", "mg.GPT2Model"),
    ],
)
def test_the_library_classes_are_read_through_aliases_and_module_imports(imports, base, built):
    """The library's name of a class decides (facts/library_imports.py), however the file spells it; the prefilter
    reads the same imports, so it never calls such a head clean before the engine sees it."""
    from cachemigrate.source.prefilter import nothing_to_migrate

    code = (
        PREFIX.read_text()
        .replace("from transformers import GPT2Model, GPT2PreTrainedModel", imports)
        .replace("class PrefixSpeechHead(GPT2PreTrainedModel):", f"class PrefixSpeechHead({base}):")
        .replace("self.transformer = GPT2Model(config)", f"self.transformer = {built}(config)")
    )
    info = analyze(cst.parse_module(code), ruleset("4.52").era.cache_names)
    [head] = info.library_heads
    assert (head.name, head.attribute, head.model) == ("PrefixSpeechHead", "transformer", built)
    assert head.module.split(".")[0] == "transformers"
    assert not nothing_to_migrate(code, ruleset("4.52").era.cache_names)
    assert migrate(code, "4.52").status == "migrated"


def test_a_model_built_from_a_sibling_module_is_no_library_model():
    code = PREFIX.read_text().replace(
        "from transformers import GPT2Model, GPT2PreTrainedModel",
        "from transformers import GPT2PreTrainedModel\n\nfrom .backbone import GPT2Model",
    )
    info = analyze(cst.parse_module(code), ruleset("4.52").era.cache_names)
    assert info.library_heads == [] and "library_head" not in info.roles
    result = migrate(code, "4.52")
    assert result.status == "failed" and [d.code for d in result.diagnostics] == ["CM903"]
    assert "hands the past to no model it builds in its `__init__` from a model class imported from transformers" in (
        result.diagnostics[0].message
    )


# -- what each era writes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
def test_the_head_migrates_in_every_era(era):
    result = migrate(PREFIX.read_text(), era)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    new = result.migrated
    assert "class PrefixSpeechHead(GPT2PreTrainedModel, GenerationMixin):" in new  # CM032
    # CM107: the first step, told in the forward; CM103: in the generation hook; CM021: beams of a Cache
    assert (
        "if not past_key_values or (isinstance(past_key_values, Cache) and past_key_values.get_seq_length() == 0):"
        in new
    )
    assert (
        "if past_key_values and (not isinstance(past_key_values, Cache) or past_key_values.get_seq_length() > 0):"
        in new
    )
    assert "past_key_values.reorder_cache(beam_idx)" in new
    handed = {
        "4.52": None,  # 4.42-4.53: the library model is handed what the head was handed (GPT-2 takes tuples there)
        "4.56": "past_key_values = DynamicCache.from_legacy_cache(past_key_values)",
        "5": "past_key_values = DynamicCache(past_key_values)",
        "portable": 'and getattr(self.transformer, "_supports_cache_class", True)',
    }[era]
    if handed is None:
        assert "DynamicCache" not in new and "return_legacy_cache" not in new
    else:
        assert handed in new
        assert "outputs = legacy_past_in_outputs(outputs)" in new  # CM110, right after the hand-off
        assert _line(new, "outputs = legacy_past_in_outputs(outputs)") == _line(new, "return_dict=return_dict,") + 3


# -- 4.51.3: bit for bit ----------------------------------------------------------------------------------------


def _load_pair(era: str, tmp_path: Path):
    import torch

    from cachemigrate.probe.loading import load_modeling_module

    result = migrate(PREFIX.read_text(), era)
    shutil.copytree(PREFIX.parent, tmp_path / era)
    (tmp_path / era / PREFIX.name).write_text(result.migrated)
    modules = [load_modeling_module(PREFIX), load_modeling_module(tmp_path / era / PREFIX.name)]
    sizes = {"n_embd": 32, "n_layer": 2, "n_head": 4, "vocab_size": 99, "n_positions": 64}
    torch.manual_seed(0)
    original = modules[0].PrefixSpeechHead(modules[0].PrefixSpeechConfig(**sizes)).eval()
    new = modules[1].PrefixSpeechHead(modules[1].PrefixSpeechConfig(**sizes)).eval()
    assert original.config._attn_implementation == new.config._attn_implementation
    new.load_state_dict(original.state_dict())
    return original, new


def _equal(a, b) -> bool:
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("era", ["4.52", "portable"])
def test_on_4_51_3_the_migrated_head_gives_the_originals_tensors_and_tokens_bit_for_bit(era, tmp_path):
    """GPT2Model of 4.51.3 takes tuples only: era 4.52 and portable (``_supports_cache_class`` is False there) hand
    it the tuple as the original did, and every logit, cached tensor and generated token is the original's."""
    import torch

    original, new = _load_pair(era, tmp_path)
    prompt = torch.tensor([[5, 9, 13, 2, 7], [3, 3, 8, 1, 4]])
    with torch.no_grad():
        assert _equal(
            original(input_ids=prompt, use_cache=False).logits, new(input_ids=prompt, use_cache=False).logits
        )
        a, b = original(input_ids=prompt, use_cache=True), new(input_ids=prompt, use_cache=True)
        for step in range(3):
            assert _equal(a.logits, b.logits) and _equal(a.past_key_values, b.past_key_values)
            assert isinstance(b.past_key_values, tuple)
            token = a.logits[:, -1:].argmax(-1)
            a = original(input_ids=token, past_key_values=a.past_key_values, use_cache=True)
            b = new(input_ids=token, past_key_values=b.past_key_values, use_cache=True)
        for beams in (1, 3):
            kwargs = {"max_new_tokens": 6, "do_sample": False, "num_beams": beams, "pad_token_id": 0}
            assert torch.equal(original.generate(prompt, **kwargs), new.generate(prompt, **kwargs))


@pytest.mark.parametrize("era", ["4.52", "portable"])
def test_the_same_version_probe_on_4_51_3_keeps_the_tuple_path_of_a_tuple_only_library_model(era, tmp_path):
    """On 4.51.3 GPT2Model takes no Cache: the probe skips the Cache checks saying why (the original cannot take one
    either), greedy ``generate()`` decodes with tuples, and nothing diverges."""
    from cachemigrate.probe import run_probe

    result = migrate(PREFIX.read_text(), era)
    shutil.copytree(PREFIX.parent, tmp_path / era)
    (tmp_path / era / PREFIX.name).write_text(result.migrated)
    results = {r.name: r for r in run_probe(PREFIX, tmp_path / era / PREFIX.name)}
    assert {r.status for r in results.values()} <= {"pass", "skip"}, [
        (r.name, r.status, r.detail) for r in results.values()
    ]
    assert results["dynamic_cache_in_same_object"].status == "skip"
    assert (
        "the library model it wraps (GPT2Model of this transformers)" in results["dynamic_cache_in_same_object"].detail
    )
    assert results["generate_greedy"].status == "pass" and "decoded with tuples" in results["generate_greedy"].detail
    for name in ("logits_no_cache", "tuple_cache_stepwise", "tuple_in_tuple_out", "generate_beam", "left_padding"):
        assert results[name].status == "pass", (name, results[name].detail)


# -- 4.57.6 and 5.25.0: the cross-version probe -----------------------------------------------------------------


@pytest.mark.runtimes
@pytest.mark.parametrize(
    "era,runtime", [("4.56", "4.56"), ("5", "5"), ("portable", "4.56"), ("portable", "5")], ids=lambda v: v
)
def test_the_cross_version_probe_passes_through_generate(era, runtime, tmp_path):
    """The original head on 4.51.3, the migrated one on 4.57.6 / 5.25.0: logits, a tuple in gives a tuple out, a
    Cache in comes back as the same object, ``use_cache=False`` with a past, ``return_dict=False``, left padding,
    and greedy and beam ``generate()`` through the head (handed a DynamicCache) give the original's tokens."""
    from cachemigrate.probe.cross import run_cross_probe
    from cachemigrate.probe.report import PASS, SKIP

    python = Path(RUNTIMES[runtime])
    if not python.is_file():
        pytest.skip(f"no interpreter at {python}")
    result = migrate(PREFIX.read_text(), era)
    shutil.copytree(PREFIX.parent, tmp_path / era)
    migrated = tmp_path / era / PREFIX.name
    migrated.write_text(result.migrated)
    report = run_cross_probe(PREFIX, migrated, migrated_python=str(python), timeout=300)
    statuses = {r.name: r.status for r in report.results}
    assert set(statuses.values()) <= {PASS, SKIP}, [(r.name, r.status, r.detail) for r in report.results]
    for check in (
        "logits_no_cache",
        "tuple_in_tuple_out",
        "tuple_cache_stepwise",
        "cache_in_same_cache",
        "use_cache_false_with_past",
        "return_dict_false",
        "left_padding",
        "generate_greedy",
        "generate_beam",
    ):
        assert statuses[check] == PASS, (check, statuses)


# -- near-misses ------------------------------------------------------------------------------------------------


LATE_TEST = (
    "        logits = self.speech_head(outputs[0][:, -input_ids.shape[1] :])\n",
    (
        "        logits = self.speech_head(outputs[0])\n        if past_key_values is None:\n"
        "            logits = logits[:, prefix_length:]\n"
    ),
)


@pytest.mark.parametrize("era", ERAS)
def test_a_presence_test_after_the_library_model_ran_is_refused_at_its_line(era):
    code = PREFIX.read_text().replace(*LATE_TEST)
    result = migrate(code, era)
    assert result.status == "failed" and result.migrated == code
    [diagnostic] = result.diagnostics
    assert diagnostic.code == "CM900" and diagnostic.line == _line(code, "        if past_key_values is None:")
    assert "after handing it to `self.transformer` (GPT2Model of the installed transformers)" in diagnostic.message
    assert "`first_step = past_key_values is None`" in diagnostic.message


def test_a_flag_set_before_the_call_and_tested_after_it_migrates():
    code = PREFIX.read_text().replace(
        "        if not past_key_values:\n", "        first_step = not past_key_values\n        if first_step:\n"
    )
    code = code.replace(LATE_TEST[0], LATE_TEST[1].replace("if past_key_values is None:", "if first_step:"))
    result = migrate(code, "4.56")
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    assert "first_step = not past_key_values or (" in result.migrated
    assert "        if first_step:\n            logits = logits[:, prefix_length:]" in result.migrated


HANDED_BACK = (
    "        outputs = self.transformer(\n",
    "        if use_cache is False:\n            past_key_values = None\n        outputs = self.transformer(\n",
)


@pytest.mark.parametrize("era", ["4.56", "5", "portable"])
def test_a_head_that_does_not_bind_what_its_library_model_returns_is_refused(era):
    """The way back needs the outputs under a name in the forward's own body: a head that returns the call (or
    calls it inside an ``if``) is refused by CM110, which says so; era 4.52, which hands the past on as it is,
    needs no way back and migrates."""
    code = PREFIX.read_text()
    start = code.index("        outputs = self.transformer(")
    end = code.index("        logits = self.speech_head")
    code = (
        code[:start]
        + "        return self.transformer("
        + code[start + len("        outputs = self.transformer(") : end]
    )
    code += PREFIX.read_text()[PREFIX.read_text().index("    def prepare_inputs_for_generation") - 1 :]
    result = migrate(code, era)
    assert result.status == "failed" and result.migrated == code
    [diagnostic] = [d for d in result.diagnostics if d.code == "CM901"]
    assert "CM110" in diagnostic.message
    assert "binding what its library model returns to a name" in diagnostic.message
    assert migrate(code, "4.52").status == "migrated"


def test_the_first_step_audit_covers_a_library_heads_forward():
    """Without CM107 the forward's ``if not past_key_values:`` would take generate()'s empty first-step Cache for a
    past: the first-step audit refuses the file at that test."""
    full = ruleset("4.56")
    rules = dataclasses.replace(full, rules=tuple(r for r in full.rules if r.id != "CM107"))
    code = PREFIX.read_text()
    result = migrate(code, "4.56", rules)
    assert result.status == "failed" and result.migrated == code
    lines = {d.line for d in result.diagnostics if d.code == "CM900"}
    assert lines == {_line(code, "        if not past_key_values:")}
