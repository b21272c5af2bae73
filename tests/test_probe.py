"""Tests for the equivalence probe (cachemigrate.probe), run on modeling files of the installed transformers 4.51.3.

The modeling files are copied into tmp_path at test time; no transformers code is stored in this repository.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from cachemigrate.probe import (
    CHECK_NAMES,
    CheckResult,
    format_table,
    load_modeling_module,
    run_probe,
    unload_module,
)

pytestmark = pytest.mark.corpus

transformers = pytest.importorskip("transformers")
MODELS_DIR = Path(transformers.__file__).parent / "models"

# What an unmigrated file gives against an identical copy: every check passes or is skipped, except the two that
# require the Cache API from the "migrated" side.
# The cross-attention checks run where a causal head takes encoder states (GPT-2 and ImageGPT with
# add_cross_attention), or a base model in a file without a head (Decision Transformer's GPT-2); two of them need the
# Cache API too, and none caches a cross-attention part.
NEEDS_CACHE_API = {
    "dynamic_cache_in_same_object": "fail",
    "generate_greedy": "fail",
    "cross_self_only_cache": "fail",
    "cross_generate": "fail",
}
STATIC = {"static_generate", "static_compile"}  # skipped unless the migrated file claims static support
CROSS = {name for name in CHECK_NAMES if name.startswith("cross_")} | {"encoder_decoder_model"}
SKIPPED = {
    "gpt2": STATIC | {"cross_cache_written_once"},
    "ctrl": {"sdpa", "gradient_checkpointing"} | STATIC | CROSS,
    "imagegpt": {"sdpa", "cross_sdpa", "cross_cache_written_once"} | STATIC,
    "decision_transformer": {"generate_greedy", "generate_beam", "sdpa", "cross_sdpa", "cross_cache_written_once"}
    | {"cross_generate", "encoder_decoder_model"}  # a base model: no head to generate with
    | STATIC,
}
# ImageGPT's tiny config does not fit an EncoderDecoderModel (its head reshapes to the image size): both sides raise
SETUP_ERRORS = {"imagegpt": {"encoder_decoder_model"}}


def expected_statuses(model: str) -> dict:
    statuses = {name: "pass" for name in CHECK_NAMES}
    statuses.update(NEEDS_CACHE_API)
    statuses.update({name: "skip" for name in SKIPPED[model]})
    statuses.update({name: "setup-error" for name in SETUP_ERRORS.get(model, ())})
    return statuses


def copy_modeling_file(model: str, folder: Path, name: str | None = None, edit=None) -> Path:
    """Copy transformers' modeling_<model>.py into ``folder``, optionally rewriting its text with ``edit``."""
    source = (MODELS_DIR / model / f"modeling_{model}.py").read_text(encoding="utf-8")
    if edit is not None:
        edited = edit(source)
        assert edited != source, "the edit did not apply"
        source = edited
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name or f"modeling_{model}.py")
    path.write_text(source, encoding="utf-8")
    return path


def statuses(results: list[CheckResult]) -> dict:
    return {r.name: r.status for r in results}


def describe(results: list[CheckResult]) -> str:
    return "\n" + format_table(results)


# --------------------------------------------------------------------------------------------------------------------
# Original vs identical copy
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["gpt2", "ctrl", "imagegpt", "decision_transformer"])
def test_identical_copy_passes_all_but_the_cache_api_checks(tmp_path, model):
    original = copy_modeling_file(model, tmp_path / "original")
    migrated = copy_modeling_file(model, tmp_path / "migrated")
    results = run_probe(original, migrated)
    assert [r.name for r in results] == list(CHECK_NAMES)
    assert statuses(results) == expected_statuses(model), describe(results)
    assert all(r.detail for r in results), describe(results)


def test_same_path_twice_loads_two_independent_modules(tmp_path):
    original = copy_modeling_file("ctrl", tmp_path)
    results = run_probe(original, original, checks=["logits_no_cache", "dynamic_cache_in_same_object"])
    assert statuses(results) == {"logits_no_cache": "pass", "dynamic_cache_in_same_object": "fail"}
    assert "KeyError" in results[1].detail
    assert not [name for name in sys.modules if "_cm_" in name], "probe modules left in sys.modules"


# --------------------------------------------------------------------------------------------------------------------
# The probe catches broken migrations, and passes a correct one
# --------------------------------------------------------------------------------------------------------------------


def drop_the_past(source: str) -> str:
    """A broken 'migration': the attention ignores the cached keys and values."""
    return source.replace("key_states = torch.cat((past_key, key_states), dim=-2)", "key_states = key_states").replace(
        "value_states = torch.cat((past_value, value_states), dim=-2)", "value_states = value_states"
    )


def test_dropping_the_past_fails_tuple_cache_stepwise(tmp_path):
    original = copy_modeling_file("gpt2", tmp_path / "original")
    broken = copy_modeling_file("gpt2", tmp_path / "migrated", edit=drop_the_past)
    results = run_probe(original, broken, checks=["logits_no_cache", "tuple_cache_stepwise", "tuple_in_tuple_out"])
    assert statuses(results) == {
        "logits_no_cache": "pass",
        "tuple_cache_stepwise": "fail",
        "tuple_in_tuple_out": "fail",
    }, describe(results)
    assert results[1].detail.startswith("step 1 logits"), describe(results)


def test_positional_signature_change_fails_positional_call(tmp_path):
    def insert_parameter_mid_signature(source: str) -> str:
        return source.replace(
            "        past_key_values: Optional[Tuple[Tuple[torch.FloatTensor]]] = None,\n",
            "        cache_position: Optional[torch.LongTensor] = None,\n"
            "        past_key_values: Optional[Tuple[Tuple[torch.FloatTensor]]] = None,\n",
        )

    original = copy_modeling_file("ctrl", tmp_path / "original")
    broken = copy_modeling_file("ctrl", tmp_path / "migrated", edit=insert_parameter_mid_signature)
    results = run_probe(original, broken, checks=["logits_no_cache", "positional_call"])
    assert statuses(results)["logits_no_cache"] == "pass", describe(results)
    assert statuses(results)["positional_call"] in {"fail", "error"}, describe(results)


def hand_migrate_gpt2(source: str) -> str:
    """A minimal, correct dynamic-tier migration of GPT-2 (about 30 changed lines), as a positive control."""
    edits = [
        (
            "from ...generation import GenerationMixin\n",
            "from ...cache_utils import Cache, DynamicCache\nfrom ...generation import GenerationMixin\n",
        ),
        ("    _supports_sdpa = True\n", "    _supports_sdpa = True\n    _supports_cache_class = True\n"),
        (
            "            past_key, past_value = layer_past\n"
            "            key_states = torch.cat((past_key, key_states), dim=-2)\n"
            "            value_states = torch.cat((past_value, value_states), dim=-2)\n"
            "\n"
            "        if use_cache is True:\n"
            "            present = (key_states, value_states)\n"
            "        else:\n"
            "            present = None\n",
            "            key_states, value_states = layer_past.update(key_states, value_states, self.layer_idx)\n"
            "        present = layer_past if use_cache is True else None\n",
        ),
        (
            "        if past_key_values is None:\n"
            "            past_length = 0\n"
            "            past_key_values = tuple([None] * len(self.h))\n"
            "        else:\n"
            "            past_length = past_key_values[0][0].size(-2)\n",
            "        return_legacy_cache = False\n"
            "        if past_key_values is None:\n"
            "            if use_cache:\n"
            "                return_legacy_cache = True\n"
            "                past_key_values = DynamicCache()\n"
            "        elif not isinstance(past_key_values, Cache):\n"
            "            return_legacy_cache = True\n"
            "            past_key_values = DynamicCache.from_legacy_cache(past_key_values)\n"
            "        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0\n",
        ),
        ("block, layer_past = self.h[i], past_key_values[i]", "block, layer_past = self.h[i], past_key_values"),
        ("            if use_cache is True:\n                presents = presents + (outputs[1],)\n", ""),
        (
            "        hidden_states = self.ln_f(hidden_states)\n",
            "        if use_cache:\n"
            "            presents = past_key_values.to_legacy_cache() if return_legacy_cache else past_key_values\n"
            "        hidden_states = self.ln_f(hidden_states)\n",
        ),
    ]
    for old, new in edits:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return source


def test_correct_hand_migration_passes_every_check(tmp_path):
    original = copy_modeling_file("gpt2", tmp_path / "original")
    migrated = copy_modeling_file("gpt2", tmp_path / "migrated", edit=hand_migrate_gpt2)
    results = run_probe(original, migrated)
    expected = {name: "pass" for name in CHECK_NAMES}
    expected.update({name: "skip" for name in STATIC})
    expected["cross_cache_written_once"] = "skip"  # GPT-2 recomputes its cross-attention: no cross cache
    assert statuses(results) == expected, describe(results)
    assert "DynamicCache" in {r.name: r.detail for r in results}["generate_greedy"]


def test_static_requested_on_a_dynamic_only_migration_is_not_a_pass(tmp_path):
    original = copy_modeling_file("gpt2", tmp_path / "original")
    migrated = copy_modeling_file("gpt2", tmp_path / "migrated", edit=hand_migrate_gpt2)
    assert statuses(run_probe(original, migrated, checks=["static_generate"], static=False)) == {
        "static_generate": "skip"
    }
    forced = run_probe(original, migrated, checks=["static_generate"], static=True)
    assert forced[0].status in {"fail", "error"}, describe(forced)


def test_migrated_file_that_does_not_import_errors_every_check(tmp_path):
    original = copy_modeling_file("gpt2", tmp_path / "original")
    broken = tmp_path / "migrated" / "modeling_gpt2.py"
    broken.parent.mkdir()
    broken.write_text("def broken(:\n", encoding="utf-8")
    results = run_probe(original, broken, checks=["logits_no_cache", "generate_beam"])
    assert statuses(results) == {"logits_no_cache": "error", "generate_beam": "error"}
    assert results[0].detail.startswith("setup failed: SyntaxError")


def test_unknown_check_and_missing_file_raise(tmp_path):
    original = copy_modeling_file("gpt2", tmp_path)
    with pytest.raises(ValueError, match="unknown check"):
        run_probe(original, original, checks=["logits_no_cache", "no_such_check"])
    with pytest.raises(FileNotFoundError):
        run_probe(original, tmp_path / "missing.py")


# --------------------------------------------------------------------------------------------------------------------
# load_modeling_module
# --------------------------------------------------------------------------------------------------------------------


def test_load_relative_import_file_under_its_transformers_package(tmp_path):
    path = copy_modeling_file("gpt2", tmp_path)
    first = load_modeling_module(path, alias="_cm_test_first")
    second = load_modeling_module(path, alias="_cm_test_second")
    try:
        assert first.__name__ == "transformers.models.gpt2._cm_test_first"
        assert first.__file__ == str(path.resolve())
        assert first.GPT2Model is not second.GPT2Model
        assert first.GPT2Model is not transformers.GPT2Model
        assert first.GPT2Config is transformers.GPT2Config  # `from .configuration_gpt2 import` resolved
    finally:
        unload_module(first)
        unload_module(second)
    assert "transformers.models.gpt2._cm_test_first" not in sys.modules


def test_load_guesses_the_package_through_a_file_name_suffix(tmp_path):
    path = copy_modeling_file("decision_transformer", tmp_path, name="modeling_decision_transformer_migrated.py")
    module = load_modeling_module(path)
    try:
        assert module.__name__.startswith("transformers.models.decision_transformer._cm_")
    finally:
        unload_module(module)


def test_load_relative_import_file_without_a_package_fails_clearly(tmp_path):
    path = tmp_path / "modeling_nosuchmodel.py"
    path.write_text("from ...activations import ACT2FN\n", encoding="utf-8")
    with pytest.raises(ModuleNotFoundError, match=r"transformers\.models\.nosuchmodel"):
        load_modeling_module(path)
    with pytest.raises(ModuleNotFoundError, match="not importable"):
        load_modeling_module(path, package="transformers.models.nosuchmodel")
    odd = tmp_path / "model.py"
    odd.write_text("from ...activations import ACT2FN\n", encoding="utf-8")
    with pytest.raises(ValueError, match="modeling_<name>.py"):
        load_modeling_module(odd)


REMOTE_CONFIG = """
from transformers import PretrainedConfig


class ToyConfig(PretrainedConfig):
    model_type = "toy"
"""

REMOTE_MODELING = """
from transformers.modeling_utils import PreTrainedModel

from .configuration_toy import ToyConfig


class ToyPreTrainedModel(PreTrainedModel):
    config_class = ToyConfig
"""


def test_load_remote_code_folder_as_a_private_package(tmp_path):
    (tmp_path / "configuration_toy.py").write_text(REMOTE_CONFIG, encoding="utf-8")
    (tmp_path / "modeling_toy.py").write_text(REMOTE_MODELING, encoding="utf-8")
    first = load_modeling_module(tmp_path / "modeling_toy.py", alias="a")
    second = load_modeling_module(tmp_path / "modeling_toy.py", alias="b")
    try:
        assert first.__name__.endswith(".modeling_toy")
        assert not first.__name__.startswith("transformers")
        assert first.ToyConfig.__module__ == first.__name__.rsplit(".", 1)[0] + ".configuration_toy"
        assert first.ToyConfig is not second.ToyConfig
    finally:
        unload_module(first)
        unload_module(second)
    assert not [name for name in sys.modules if name.startswith("_cm_pkg")]


# --------------------------------------------------------------------------------------------------------------------
# Reporting and import cost
# --------------------------------------------------------------------------------------------------------------------


def test_format_table_aligns_columns():
    table = format_table(
        [CheckResult("logits_no_cache", "pass", "bit-identical", 0.5), CheckResult("sdpa", "skip", "no sdpa", 12.25)]
    )
    lines = table.splitlines()
    assert lines[0].split() == ["check", "status", "detail", "seconds"]
    assert lines[2].startswith("logits_no_cache  pass    bit-identical") and lines[2].endswith("0.50")
    assert lines[3].startswith("sdpa             skip    no sdpa") and lines[3].endswith("12.25")
    assert len({len(line) for line in lines[:2]}) == 1


def test_importing_the_probe_does_not_import_torch():
    code = (
        "import pkgutil, importlib, sys\n"
        "import cachemigrate.probe as probe\n"
        "for info in pkgutil.walk_packages(probe.__path__, 'cachemigrate.probe.'):\n"
        "    importlib.import_module(info.name)\n"
        "assert {'logits_no_cache', 'output_hidden_states', 'cross_cache_written_once'} <= set(probe.CHECK_NAMES)\n"
        "assert len(set(probe.CHECK_NAMES)) == len(probe.CHECK_NAMES), probe.CHECK_NAMES\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'heavy import'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------------------------------------------------
# The check registry
# --------------------------------------------------------------------------------------------------------------------


def test_a_check_is_one_registered_function(tmp_path):
    from cachemigrate.probe import REGISTRY, check

    @check(lambda probe: None if not probe.has_head else "only for files without a generation head")
    def example_extra_check(probe):
        """An extra check, registered by a test."""
        original, migrated = probe.pair()
        return f"{type(original).__name__} vs {type(migrated).__name__}"

    try:
        assert REGISTRY["example_extra_check"].doc == "An extra check, registered by a test."
        with_head = copy_modeling_file("ctrl", tmp_path / "ctrl")
        [result] = run_probe(with_head, with_head, checks=["example_extra_check"])
        assert (result.status, result.detail) == ("skip", "only for files without a generation head")
        headless = copy_modeling_file("decision_transformer", tmp_path / "dt")
        [result] = run_probe(headless, headless, checks=["example_extra_check"])
        assert result.status == "pass", result.detail
        assert result.detail == "DecisionTransformerGPT2Model vs DecisionTransformerGPT2Model"
    finally:
        del REGISTRY["example_extra_check"]
    assert "example_extra_check" not in CHECK_NAMES


def test_registry_refuses_a_second_check_of_a_name_and_a_check_without_a_docstring():
    from cachemigrate.probe import check

    def sdpa(probe):
        """Another sdpa."""

    def undocumented(probe):
        return ""

    with pytest.raises(ValueError, match="registered twice"):
        check()(sdpa)
    with pytest.raises(ValueError, match="no docstring"):
        check()(undocumented)


def test_from_legacy_cache_is_tried_only_on_pairs_in_a_cache_layout():
    """The probe hands the migrated model ``DynamicCache.from_legacy_cache(original past)`` only where that builds
    the right Cache: (key, value) pairs of 4-D tensors of one shape per layer; not GPTBigCode's fused tensor per
    layer, nor BLOOM's transposed keys with batch and heads merged."""
    import torch

    from cachemigrate.probe.runtime import in_cache_layout

    def grown(k):  # the same past one token later
        return tuple((torch.cat((a, a[..., -1:, :]), dim=-2), torch.cat((b, b[..., -1:, :]), dim=-2)) for a, b in k)

    k = torch.zeros(2, 4, 5, 8)
    assert in_cache_layout(((k, k), (k, k)), grown(((k, k), (k, k))))
    assert in_cache_layout([(k, k)], grown([(k, k)]))
    fused = [torch.zeros(2, 5, 16), torch.zeros(2, 5, 16)]  # fused, multi-query
    assert not in_cache_layout(fused, [torch.zeros(2, 6, 16), torch.zeros(2, 6, 16)])
    bloom = ((torch.zeros(8, 8, 5), torch.zeros(8, 5, 8)),)  # [b*h,d,s], [b*h,s,d]
    assert not in_cache_layout(bloom, ((torch.zeros(8, 8, 6), torch.zeros(8, 6, 8)),))
    assert not in_cache_layout((), ())


MUSICGEN_CHECKS = ["generate_greedy", "generate_beam", "gradient_checkpointing", "cross_tuple_stepwise"]


def test_musicgen_copy_runs_its_generate_training_and_seq2seq_checks(tmp_path):
    """MusicGen: its own generate() has no beam search and sets up no cache, its head takes labels per codebook,
    and its seq2seq head needs a composite config. An identical copy passes greedy, training and tuple decoding
    with encoder states on BOTH heads (the seq2seq one included); beams are skipped with the original's reason."""
    original = copy_modeling_file("musicgen", tmp_path / "original")
    migrated = copy_modeling_file("musicgen", tmp_path / "migrated")
    results = {r.name: r for r in run_probe(original, migrated, checks=MUSICGEN_CHECKS)}
    assert {n: r.status for n, r in results.items()} == {
        "generate_greedy": "pass",
        "generate_beam": "skip",
        "gradient_checkpointing": "pass",
        "cross_tuple_stepwise": "pass",
    }, describe(list(results.values()))
    assert "greedy but not 3 beams" in results["generate_beam"].detail
    assert (
        "seq2seq MusicgenForConditionalGeneration: 5 + 3 steps bit-identical" in results["cross_tuple_stepwise"].detail
    )


def test_a_migrated_head_that_rejects_labels_the_original_takes_fails_gradient_checkpointing(tmp_path):
    """The no-labels fallback is the original's to take: a migrated GPT-2 head that raises on labels diverges."""
    original = copy_modeling_file("gpt2", tmp_path / "original")

    def reject_labels(source):
        anchor = "        return_dict = return_dict if return_dict is not None else self.config.use_return_dict\n"
        guard = "        if labels is not None:\n            raise ValueError('no labels')\n"
        return source.replace(anchor, anchor + guard, 1)

    migrated = copy_modeling_file("gpt2", tmp_path / "migrated", edit=reject_labels)
    (result,) = run_probe(original, migrated, checks=["gradient_checkpointing"])
    assert result.status == "error", describe([result])
