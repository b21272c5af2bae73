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


# -- beams reordered by a function of the head's own, over an encoder-decoder model -----------------------------------------------------

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
def test_beams_reordered_by_the_heads_own_function_reorder_a_cache_with_it(era):
    """A Cache reorders itself by rows of the batch (``reorder_cache(beam_idx)``): CM021's guard would pick the wrong
    rows where the head views each beam as several stacked rows. CM026 hands a Cache's tensors to the head's own
    function instead (``reorder_cache_tensors``), before the statement that holds the comprehension, and keeps the
    tuple code; without the stacked function the same head gets CM021's guard."""
    result = migrate(STACKED, era)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    assert "CM026" in result.applied and "CM021" not in result.applied
    assert "past_key_values.reorder_cache(beam_idx)" not in result.migrated
    guard = "return reorder_cache_tensors(past_key_values, lambda state: per_beam(state, beam_idx.to(state.device)))"
    lines = [line.strip() for line in result.migrated.splitlines()]
    assert guard in lines and lines.index(guard) < lines.index("return tuple(")
    assert "def reorder_cache_tensors(cache, reorder):" in result.migrated
    # generate() of 4.42-4.53 reorders a Cache by rows unless `_temporary_reorder_cache` routes it to the head (CM027)
    assert ("def _temporary_reorder_cache(" in result.migrated) == (era in ("4.52", "portable"))
    by_rows = STACKED.replace("per_beam(state, beam_idx.to(state.device))", "state.index_select(0, beam_idx)")
    migrated = migrate(by_rows, era)
    assert migrated.status == "migrated" and "past_key_values.reorder_cache(beam_idx)" in migrated.migrated
    assert "CM026" not in migrated.applied


@pytest.mark.parametrize("era", ERAS)
def test_a_model_an_encoder_decoder_auto_class_builds_is_handed_an_encoder_decoder_cache(era):
    """``AutoModelForSeq2SeqLM``: four tensors per layer, which a DynamicCache cannot hold (4.57's
    ``from_legacy_cache`` unpacks two per layer): the head is ``library_seq2seq``, not ``library_model``, and its
    rules (CM117/CM118) hand the model an EncoderDecoderCache and give tuples back; era 4.52 hands the past as it
    came (the model takes what 4.42-4.53 hand it)."""
    code = STACKED.replace("AutoModelForCausalLM", "AutoModelForSeq2SeqLM").replace(
        "config.text_config", "config.generator"
    )
    code = code.replace("per_beam(state, beam_idx.to(state.device))", "state.index_select(0, beam_idx)")
    info = analyze(cst.parse_module(code), ruleset(era).era.cache_names)
    (head,) = info.library_heads
    assert head.encoder_decoder and info.roles["library_seq2seq"] == ["PassageReader"]
    assert not info.roles["library_model"]
    result = migrate(code, era)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    # never a DynamicCache of four tensors per layer: only an empty one, for the cross-attention of a wrapped Cache
    assert "DynamicCache(past_key_values)" not in result.migrated and "DynamicCache.from_legacy" not in result.migrated
    if era == "4.52":
        assert "EncoderDecoderCache" not in result.migrated and "DynamicCache" not in result.migrated
    else:
        assert {"CM117", "CM118"} <= set(result.applied)
        assert "outputs = encoder_decoder_past_in_outputs(outputs)" in result.migrated
        assert "past_key_values = EncoderDecoderCache(past_key_values, DynamicCache())" in result.migrated
    built = {"4.56": "EncoderDecoderCache.from_legacy_cache(past_key_values)", "5": "EncoderDecoderCache(past_key_values)"}
    built["portable"] = "encoder_decoder_cache_of(past_key_values)"
    assert era == "4.52" or f"past_key_values = {built[era]}" in result.migrated


def test_a_model_built_into_a_local_of_init_is_taken():
    """``generator = AutoModelForSeq2SeqLM.from_config(...)`` under ``if generator is None:`` (the auto class imported
    inside ``__init__``), then ``self.generator = generator``: the head is over that model; a local set to something
    else than a call (a model handed in only) is not."""
    code = STACKED.replace(
        "        self.reader = AutoModelForCausalLM.from_config(config.text_config)\n",
        "        from transformers import AutoModelForSeq2SeqLM\n\n"
        "        generator = kwargs.get('generator')\n"
        "        if generator is None:\n"
        "            generator = AutoModelForSeq2SeqLM.from_config(config.generator)\n"
        "        self.reader = generator\n",
    ).replace("def __init__(self, config):", "def __init__(self, config, **kwargs):")
    assert "self.reader = generator" in code
    (head,) = analyze(cst.parse_module(code), ruleset("5").era.cache_names).library_heads
    assert head.attribute == "reader" and head.encoder_decoder
    handed = code.replace("            generator = AutoModelForSeq2SeqLM.from_config(config.generator)\n", "            pass\n")
    assert not analyze(cst.parse_module(handed), ruleset("5").era.cache_names).library_heads


def test_rag_migrates_in_every_era():
    """transformers' own RAG (4.51.3): the generator is built with an auto class into a local of ``__init__`` and
    handed the past from ``RagModel``; its ``_reorder_cache`` reorders the n_docs rows of each beam with
    ``_reorder_stacked``, which CM026 applies to a Cache's tensors."""
    import transformers

    path = Path(transformers.__file__).parent / "models" / "rag" / "modeling_rag.py"
    if not path.is_file():
        pytest.skip("the installed transformers has no RAG")
    code = path.read_text()
    for era in ERAS:
        result = migrate(code, era, path=str(path))
        assert result.status == "migrated", [str(d) for d in result.diagnostics]
        assert "lambda past_state: _reorder_stacked(past_state, beam_idx.to(past_state.device))" in result.migrated
        assert ("gen_outputs = encoder_decoder_past_in_outputs(gen_outputs)" in result.migrated) == (era != "4.52")
