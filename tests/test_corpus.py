"""The dynamic tier on transformers 4.51.3's own "presents"-family files, proven with the equivalence probe.

The files are copied out of the installed transformers into a temp dir at test time (their code is never
stored in this repository), migrated, and imported in the transformers package namespace."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset

pytestmark = pytest.mark.corpus

transformers = pytest.importorskip("transformers")
MODELS = Path(transformers.__file__).parent / "models"
PRESENTS_FAMILY = ["gpt2", "decision_transformer", "imagegpt", "ctrl"]

# Checks that must really run (not be skipped) for each model, given what the model supports.
MUST_RUN = {
    "logits_no_cache",
    "tuple_cache_stepwise",
    "use_cache_false_with_past",
    "tuple_in_tuple_out",
    "dynamic_cache_in_same_object",
    "left_padding",
    "output_attentions",
    "return_dict_false",
    "positional_call",
    "jit_trace_tuple",
}
GENERATE = {"generate_greedy", "generate_beam"}
EXTRA_MUST_RUN = {
    "gpt2": GENERATE | {"sdpa", "gradient_checkpointing"},
    "imagegpt": GENERATE | {"gradient_checkpointing"},
    "ctrl": GENERATE,
    "decision_transformer": {"gradient_checkpointing"},  # no generation head in this file
}


@pytest.fixture(scope="module")
def ruleset():
    return load_ruleset("4.52")


@pytest.fixture(scope="module")
def migrated(tmp_path_factory, ruleset):
    """name -> (original path, migrated path, FileResult) for the four files, migrated once per test run."""
    out = {}
    for name in PRESENTS_FAMILY:
        source = MODELS / name / f"modeling_{name}.py"
        folder = tmp_path_factory.mktemp(name)
        (folder / "original").mkdir()
        (folder / "migrated").mkdir()
        original = folder / "original" / source.name
        shutil.copy(source, original)
        result = migrate_source(original.read_text(), ruleset, Options(line_length=119), path=str(original))
        target = folder / "migrated" / source.name
        target.write_text(result.migrated)
        out[name] = (original, target, result)
    return out


@pytest.mark.parametrize("name", PRESENTS_FAMILY)
def test_file_is_migrated_without_diagnostics(migrated, name):
    _, _, result = migrated[name]
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    assert result.changed
    assert "CM002" in result.applied and "CM010" in result.applied  # the update and the cache set-up
    assert "_supports_cache_class = True" in result.migrated


@pytest.mark.parametrize("name", PRESENTS_FAMILY)
def test_probe_all_checks_pass(migrated, name):
    from cachemigrate.probe import format_table, run_probe

    original, target, _ = migrated[name]
    results = {r.name: r for r in run_probe(original, target)}
    table = format_table(list(results.values()))
    bad = {n: r.detail for n, r in results.items() if r.status in ("fail", "error")}
    assert not bad, table
    must_run = MUST_RUN | EXTRA_MUST_RUN[name]
    skipped = {n for n in must_run if results[n].status != "pass"}
    assert not skipped, table


def test_ctrl_keeps_its_stacked_legacy_layout(migrated):
    """ctrl returns one torch.stack((k, v)) tensor per layer; tuple in must give that layout back."""
    import torch

    from cachemigrate.probe import load_modeling_module, unload_module

    _, target, _ = migrated["ctrl"]
    module = load_modeling_module(target)
    try:
        config = module.CTRLConfig(n_layer=2, n_embd=32, n_head=4, dff=64, vocab_size=50, n_positions=32)
        torch.manual_seed(0)
        model = module.CTRLModel(config).eval()
        ids = torch.randint(0, 50, (1, 4))
        with torch.no_grad():
            first = model(ids, use_cache=True).past_key_values
            again = model(ids[:, :1], past_key_values=first, use_cache=True).past_key_values
        assert isinstance(first, tuple) and all(isinstance(layer, torch.Tensor) for layer in first)
        assert first[0].shape[0] == 2  # stacked (key, value)
        assert again[0].shape[-2] == 5
    finally:
        unload_module(module)


@pytest.mark.parametrize("name", PRESENTS_FAMILY)
def test_migration_is_idempotent(migrated, ruleset, name):
    _, target, _ = migrated[name]
    code = target.read_text()
    again = migrate_source(code, ruleset, Options(line_length=119), path=str(target))
    assert again.status == "clean"
    assert again.migrated == code


@pytest.mark.parametrize("relative", ["llama/modeling_llama.py", "vit/modeling_vit.py"])
def test_cache_based_and_cacheless_files_are_untouched(ruleset, relative):
    code = (MODELS / relative).read_text()
    result = migrate_source(code, ruleset, Options(line_length=119), path=relative)
    assert result.status == "clean"
    assert result.diagnostics == []
    assert result.migrated == code  # byte-identical


def test_an_encoder_decoder_file_migrates_passes_the_probe_and_is_then_clean(ruleset, tmp_path):
    """BART (cross-attention, a flash class that concatenates in the kernel layout): EncoderDecoderCache rules."""
    from cachemigrate.probe import format_table, run_probe

    code = (MODELS / "bart" / "modeling_bart.py").read_text()
    result = migrate_source(code, ruleset, Options(line_length=119), path="modeling_bart.py")
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    assert any(rule.startswith("CM2") for rule in result.applied)
    again = migrate_source(result.migrated, ruleset, Options(line_length=119), path="modeling_bart.py")
    assert again.status == "clean" and again.migrated == result.migrated
    original, target = tmp_path / "original" / "modeling_bart.py", tmp_path / "migrated" / "modeling_bart.py"
    for path, text in ((original, code), (target, result.migrated)):
        path.parent.mkdir()
        path.write_text(text)
    results = run_probe(original, target)
    assert [r.name for r in results if r.status not in ("pass", "skip")] == [], format_table(results)
    assert {"tuple_in_tuple_out", "generate_greedy"} <= {r.name for r in results if r.status == "pass"}


def test_migrate_path_does_not_import_torch(tmp_path):
    source = MODELS / "gpt2" / "modeling_gpt2.py"
    copy = tmp_path / source.name
    shutil.copy(source, copy)
    script = textwrap.dedent(f"""
        import sys
        from cachemigrate.cli.main import main
        try:
            main(["migrate", "-q", {str(copy)!r}])
        except SystemExit as exit:
            assert exit.code in (0, None), exit.code
        loaded = sorted(m for m in ("torch", "transformers") if m in sys.modules)
        assert not loaded, loaded
        """)
    subprocess.run([sys.executable, "-c", script], check=True)
    assert "DynamicCache" in copy.read_text()
