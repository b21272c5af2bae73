"""Heads over a model an auto class builds (``self.language_model = AutoModelForCausalLM.from_config(config.text_config)``,
multimodal heads over a language model): the model is the library's whichever the config names, so the head is a
library head (facts/heads.py) and the rules of one apply (CM109/CM110 hand the model a Cache and give a tuple caller
tuples back, CM112 reads the past length from a Cache, CM103/CM107 tell the first step, CM021 reorders a Cache).
Proven on transformers' own Fuyu file of 4.51.3 (a head over ``AutoModelForCausalLM``, imported from
``...models.auto.modeling_auto``): it migrates in every era, and the probe compares it with its original on 4.51.3
(4.52, portable) and across runtimes on 4.57.6 / 5.25.0 (``runtimes``)."""

from __future__ import annotations

import functools
import os
import shutil
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.facts.analysis import analyze
from cachemigrate.rules.loader import load_ruleset

ERAS = ("4.52", "4.56", "5", "portable")
RUNTIMES = {
    "4.56": os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"),
    "5": os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"),
}

CAPTIONER = textwrap.dedent("""
    import torch
    from torch import nn
    {imports}


    class PatchCaptioner(PreTrainedModel):
        def __init__(self, config):
            super().__init__(config)
            self.decoder = {auto}.from_config(config.text_config)
            self.patch_proj = nn.Linear(config.patch_dim, config.text_config.hidden_size)

        def forward(self, input_ids, patches=None, past_key_values=None, use_cache=None):
            start = past_key_values[0][0].shape[2] if past_key_values is not None else 0
            embeds = self.decoder.get_input_embeddings()(input_ids)
            if patches is not None and past_key_values is None:
                embeds = embeds + self.patch_proj(patches).mean(1, keepdim=True)
            positions = torch.arange(start, start + input_ids.shape[1], device=input_ids.device)[None]
            outputs = self.decoder(inputs_embeds=embeds, position_ids=positions, past_key_values=past_key_values)
            return outputs
    """)
LIBRARY = "from transformers import AutoModelForCausalLM, PreTrainedModel"
TREE = "from ...modeling_utils import PreTrainedModel\nfrom ...models.auto.modeling_auto import AutoModelForCausalLM"


@functools.cache
def ruleset(era: str):
    return load_ruleset(era)


def migrate(code: str, era: str, path: str = "modeling_captioner.py"):
    return migrate_source(code, ruleset(era), Options(line_length=119), path=path)


def _installed_fuyu() -> Path:
    import transformers

    path = Path(transformers.__file__).parent / "models" / "fuyu" / "modeling_fuyu.py"
    if not path.is_file():
        pytest.skip("the installed transformers has no Fuyu")
    return path


# -- what the head is -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "imports, auto",
    [
        (LIBRARY, "AutoModelForCausalLM"),
        (TREE, "AutoModelForCausalLM"),
        ("import transformers\nfrom transformers import PreTrainedModel", "transformers.AutoModelForCausalLM"),
    ],
    ids=["transformers", "tree", "module"],
)
def test_a_model_an_auto_class_builds_is_a_library_model(imports, auto):
    code = CAPTIONER.format(imports=imports, auto=auto)
    info = analyze(cst.parse_module(code), ruleset("4.56").era.cache_names)
    assert info.roles["library_head"] == ["PatchCaptioner"]
    (head,) = info.library_heads
    assert (head.attribute, head.model, head.stack) == ("decoder", f"{auto}.from_config", False)


def test_an_auto_class_of_the_users_own_package_is_not_the_library():
    code = CAPTIONER.format(
        imports="from transformers import PreTrainedModel\nfrom .auto import AutoModelForCausalLM",
        auto="AutoModelForCausalLM",
    )
    info = analyze(cst.parse_module(code), ruleset("4.56").era.cache_names)
    assert not info.library_heads
    assert migrate(code, "4.56").status != "migrated"


@pytest.mark.parametrize("era", ERAS)
def test_the_captioner_migrates_in_every_era(era):
    result = migrate(CAPTIONER.format(imports=LIBRARY, auto="AutoModelForCausalLM"), era)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    new = result.migrated
    assert "past_key_values.get_seq_length()\n" in new or "past_key_values.get_seq_length() if" in new  # CM112
    if era == "4.52":  # 4.42-4.53: the model takes what the head was handed and gives back what it got
        assert "return_legacy_cache" not in new
    else:  # CM109 / CM110
        assert "return_legacy_cache = not isinstance(past_key_values, Cache)" in new
        assert "outputs = legacy_past_in_outputs(outputs)" in new
    assert migrate(new, era).status == "clean"  # idempotent


@pytest.mark.parametrize("era", ERAS)
def test_transformers_own_fuyu_migrates_in_every_era(era):
    path = _installed_fuyu()
    result = migrate(path.read_text(), era, path=str(path))
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    new = result.migrated
    assert "past_key_values.get_seq_length()" in new
    assert "past_key_values.reorder_cache(beam_idx)" in new  # CM021: a Cache reordered in place
    assert ("return_legacy_cache" in new) == (era != "4.52")


# -- 4.51.3 (4.52, portable): the same-process probe --------------------------------------------------------------


def _migrated_fuyu(era: str, tmp_path: Path) -> tuple[Path, Path]:
    path = _installed_fuyu()
    folders = {name: tmp_path / name for name in ("original", era)}
    for folder in folders.values():
        folder.mkdir()
        for name in ("modeling_fuyu.py", "configuration_fuyu.py"):
            shutil.copy(path.parent / name, folder / name)
    migrated = folders[era] / path.name
    migrated.write_text(migrate(path.read_text(), era, path=str(path)).migrated)
    return folders["original"] / path.name, migrated


@pytest.mark.parametrize("era", ["4.52", "portable"])
def test_on_4_51_3_the_migrated_fuyu_gives_the_originals_tensors_and_tokens(era, tmp_path):
    """The head claims no Cache, so 4.51.3's generate() hands it tuples and Persimmon gives them back (as the
    original); a DynamicCache handed in is filled in place and gives the tuple path's logits."""
    from cachemigrate.probe import run_probe
    from cachemigrate.probe.report import FAIL

    original, migrated = _migrated_fuyu(era, tmp_path)
    results = {r.name: r for r in run_probe(original, migrated, package="transformers.models.fuyu")}
    assert not [r for r in results.values() if r.status == FAIL], [(r.name, r.detail) for r in results.values()]
    for name in ("logits_no_cache", "tuple_cache_stepwise", "tuple_in_tuple_out", "dynamic_cache_in_same_object"):
        assert results[name].status == "pass", (name, results[name].detail)
    assert results["generate_greedy"].status == "pass" and "decoded with tuples" in results["generate_greedy"].detail
    assert results["generate_beam"].status == "pass"


# -- 4.57.6 and 5.25.0: the cross-version probe -----------------------------------------------------------------


@pytest.mark.runtimes
@pytest.mark.parametrize(
    "era,runtime", [("4.56", "4.56"), ("5", "5"), ("portable", "4.56"), ("portable", "5")], ids=lambda v: v
)
def test_the_cross_version_probe_passes_through_generate(era, runtime, tmp_path):
    """The original Fuyu on 4.51.3, the migrated one on 4.57.6 / 5.25.0: greedy and beam generate() give the
    original's tokens, decoded with a DynamicCache; a tuple in gives a tuple out, a Cache in grows in place. The
    original itself raises on a tuple past with ``use_cache=False`` on 4.51.3 (its Persimmon reads it as a Cache):
    that check is skipped, saying so."""
    from cachemigrate.probe.cross import run_cross_probe
    from cachemigrate.probe.report import PASS, SKIP

    python = Path(RUNTIMES[runtime])
    if not python.is_file():
        pytest.skip(f"no interpreter at {python}")
    original, migrated = _migrated_fuyu(era, tmp_path)
    report = run_cross_probe(
        original, migrated, migrated_python=str(python), package="transformers.models.fuyu", timeout=300
    )
    statuses = {r.name: r.status for r in report.results}
    assert set(statuses.values()) <= {PASS, SKIP}, [(r.name, r.status, r.detail) for r in report.results]
    for check in ("logits_no_cache", "tuple_in_tuple_out", "tuple_cache_stepwise", "cache_in_same_cache"):
        assert statuses[check] == PASS, (check, statuses)
    for check in ("return_dict_false", "left_padding", "generate_greedy", "generate_beam"):
        assert statuses[check] == PASS, (check, statuses)


# -- near-miss: beams reordered by a function of the head's own -----------------------------------------------------

STACKED = textwrap.dedent("""
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedModel


    class PassageReader(PreTrainedModel):
        def __init__(self, config):
            super().__init__(config)
            self.reader = AutoModelForCausalLM.from_config(config.text_config)

        def forward(self, input_ids, past_key_values=None, use_cache=None):
            outputs = self.reader(input_ids=input_ids, past_key_values=past_key_values, use_cache=use_cache)
            return outputs

        def prepare_inputs_for_generation(self, input_ids, past_key_values=None, **kwargs):
            return {"input_ids": input_ids, "past_key_values": past_key_values, **kwargs}

        @staticmethod
        def _reorder_cache(past_key_values, beam_idx):
            def per_beam(state, order):
                passages = state.shape[0] // order.shape[0]
                state = state.view(-1, passages, *state.shape[1:]).index_select(0, order)
                return state.view(-1, *state.shape[2:])

            return tuple(
                tuple(per_beam(state, beam_idx.to(state.device)) for state in layer_past)
                for layer_past in past_key_values
            )
    """)


@pytest.mark.parametrize("era", ERAS)
def test_beams_reordered_by_the_heads_own_function_are_refused_at_reorder_cache(era):
    """A Cache reorders itself by rows of the batch (``reorder_cache(beam_idx)``): CM021's guard would pick the wrong
    rows where the head views each beam as several stacked rows. Refused at its ``_reorder_cache``, naming the
    function and what to port; without the stacked function the same head migrates (CM021)."""
    result = migrate(STACKED, era)
    assert result.status == "failed"
    (diagnostic,) = result.diagnostics
    assert diagnostic.code == "CM900" and diagnostic.line == STACKED.splitlines().index("    @staticmethod") + 2
    assert "its own `per_beam(...)`" in diagnostic.message and "`cache.layers[i].keys`" in diagnostic.message
    by_rows = STACKED.replace("per_beam(state, beam_idx.to(state.device))", "state.index_select(0, beam_idx)")
    migrated = migrate(by_rows, era)
    assert migrated.status == "migrated" and "past_key_values.reorder_cache(beam_idx)" in migrated.migrated


@pytest.mark.parametrize("era", ERAS)
def test_a_model_an_encoder_decoder_auto_class_builds_is_not_taken(era):
    """``AutoModelForSeq2SeqLM``: four tensors per layer, which CM109 would hand on as a DynamicCache (4.57's
    ``from_legacy_cache`` unpacks two per layer). The file stays CM903, naming the auto class."""
    code = STACKED.replace("AutoModelForCausalLM", "AutoModelForSeq2SeqLM").replace(
        "config.text_config", "config.generator"
    )
    code = code.replace("per_beam(state, beam_idx.to(state.device))", "state.index_select(0, beam_idx)")
    assert not analyze(cst.parse_module(code), ruleset(era).era.cache_names).library_heads
    result = migrate(code, era)
    assert result.status == "failed"
    assert [d.code for d in result.diagnostics] == ["CM903"]
    assert "`AutoModelForSeq2SeqLM.from_config`" in result.diagnostics[0].message


def test_rag_is_refused_at_its_stacked_reorder_with_what_to_port():
    """transformers' own RAG (4.51.3): the generator is built with an auto class in a class of the file and handed
    the past from there; its ``_reorder_cache`` reorders the n_docs rows of each beam with ``_reorder_stacked``."""
    import transformers

    path = Path(transformers.__file__).parent / "models" / "rag" / "modeling_rag.py"
    if not path.is_file():
        pytest.skip("the installed transformers has no RAG")
    code = path.read_text()
    for era in ERAS:
        result = migrate(code, era, path=str(path))
        assert result.status == "failed"
        (diagnostic,) = result.diagnostics
        assert code.splitlines()[diagnostic.line - 1].strip() == "for layer_past in past_key_values:"
        assert (
            "RagTokenForGeneration._reorder_cache reorders each cached tensor with its own `_reorder_stacked(...)`"
            in diagnostic.message
        )
