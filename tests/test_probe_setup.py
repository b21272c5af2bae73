"""The probe's set-up: any file names, ``--package``, set-up errors reported as such, exit codes and the summary.

GPT-2 of the installed transformers 4.51.3 is copied into tmp_path at test time (see test_probe.py).
"""

import re
import sys

import pytest
from click.testing import CliRunner
from test_probe import copy_modeling_file, describe, drop_the_past, hand_migrate_gpt2, statuses

from cachemigrate.cli.main import main
from cachemigrate.probe import CheckResult, exit_status, run_probe, summary_line

pytestmark = pytest.mark.corpus

pytest.importorskip("transformers")

QUICK = ["logits_no_cache", "tuple_cache_stepwise", "dynamic_cache_in_same_object"]
SUMMARY = re.compile(r"^probe: (\d+) passed, (\d+) skipped, (\d+) diverged(, \d+ set-up errors?)? \(\d+\.\d s\)$")


def replace_once(old: str, new: str):
    def edit(source: str) -> str:
        assert source.count(old) == 1, old
        return source.replace(old, new)

    return edit


def gpt2_pair(tmp_path, original_name, migrated_name, edit=hand_migrate_gpt2, original_edit=None):
    original = copy_modeling_file("gpt2", tmp_path / "original", name=original_name, edit=original_edit)
    migrated = copy_modeling_file("gpt2", tmp_path / "migrated", name=migrated_name, edit=edit)
    return original, migrated


def probe_cli(*args):
    return CliRunner().invoke(main, ["probe", *map(str, args)])


def no_probe_modules_left() -> bool:
    return not [name for name in sys.modules if "_cm_" in name]


# --------------------------------------------------------------------------------------------------------------------
# Any file names, --package
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "original_name, migrated_name",
    [("orig.py", "modeling_gpt2.py"), ("modeling_gpt2.py", "after.py"), ("before.py", "modeling_gpt2_migrated.py")],
)
def test_only_one_file_needs_a_modeling_name(tmp_path, original_name, migrated_name):
    original, migrated = gpt2_pair(tmp_path, original_name, migrated_name)
    results = run_probe(original, migrated, checks=QUICK)
    assert statuses(results) == dict.fromkeys(QUICK, "pass"), describe(results)
    assert no_probe_modules_left()


def test_package_option_imports_files_with_any_names(tmp_path):
    original, migrated = gpt2_pair(tmp_path, "orig.py", "after.py")
    results = run_probe(original, migrated, checks=QUICK, package="transformers.models.gpt2")
    assert statuses(results) == dict.fromkeys(QUICK, "pass"), describe(results)


def test_package_option_overrides_the_file_names(tmp_path):
    """modeling_ctrl.py names the wrong package for a GPT-2 file: --package wins."""
    original, migrated = gpt2_pair(tmp_path, "modeling_ctrl.py", "modeling_ctrl.py")
    assert run_probe(original, migrated, checks=["logits_no_cache"])[0].status == "setup-error"
    fixed = run_probe(original, migrated, checks=["logits_no_cache"], package="transformers.models.gpt2")
    assert statuses(fixed) == {"logits_no_cache": "pass"}, describe(fixed)


def test_no_package_to_guess_is_one_setup_error(tmp_path):
    original, migrated = gpt2_pair(tmp_path, "orig.py", "after.py")
    results = run_probe(original, migrated)
    assert [(r.name, r.status) for r in results] == [("setup", "setup-error")]
    assert "orig.py is not named modeling_<name>.py" in results[0].detail
    assert "--package transformers.models.<name>" in results[0].detail
    assert no_probe_modules_left()


def test_unknown_package_is_one_setup_error(tmp_path):
    original, migrated = gpt2_pair(tmp_path, "modeling_gpt2.py", "modeling_gpt2.py")
    results = run_probe(original, migrated, package="transformers.models.nosuchmodel")
    assert [(r.name, r.status) for r in results] == [("setup", "setup-error")]
    assert "'transformers.models.nosuchmodel' is not importable" in results[0].detail


# --------------------------------------------------------------------------------------------------------------------
# Set-up errors of the original are one set-up error; set-up errors of the migrated file are divergences
# --------------------------------------------------------------------------------------------------------------------


def test_original_that_does_not_import_is_one_setup_error(tmp_path):
    original = tmp_path / "original" / "modeling_gpt2.py"
    original.parent.mkdir()
    original.write_text("def broken(:\n", encoding="utf-8")
    migrated = copy_modeling_file("gpt2", tmp_path / "migrated")
    results = run_probe(original, migrated)
    assert [(r.name, r.status) for r in results] == [("setup", "setup-error")]
    assert results[0].detail.startswith("cannot import the original modeling_gpt2.py: SyntaxError")


def test_original_whose_tiny_model_cannot_run_is_one_setup_error(tmp_path):
    crash = replace_once(
        "        residual = hidden_states\n        hidden_states = self.ln_1(hidden_states)\n",
        '        raise RuntimeError("rotary size does not fit the head")\n',
    )
    original, migrated = gpt2_pair(tmp_path, "modeling_gpt2.py", "modeling_gpt2.py", original_edit=crash)
    results = run_probe(original, migrated)
    assert [(r.name, r.status) for r in results] == [("setup", "setup-error")]
    assert "cannot run the original modeling_gpt2.py on a tiny model: RuntimeError: rotary size" in results[0].detail


def test_migrated_file_that_does_not_import_diverges_on_every_check(tmp_path):
    original = copy_modeling_file("gpt2", tmp_path / "original", name="orig.py")
    migrated = tmp_path / "migrated" / "modeling_gpt2.py"
    migrated.parent.mkdir()
    migrated.write_text("def broken(:\n", encoding="utf-8")
    results = run_probe(original, migrated, checks=QUICK)
    assert statuses(results) == dict.fromkeys(QUICK, "error")
    assert exit_status(results) == 1


# --------------------------------------------------------------------------------------------------------------------
# The command: table, summary line, exit codes
# --------------------------------------------------------------------------------------------------------------------


def test_cli_probe_with_any_file_names_passes_with_a_summary(tmp_path):
    original, migrated = gpt2_pair(tmp_path, "orig.py", "modeling_gpt2.py")
    result = probe_cli(original, migrated, *(f"--check={c}" for c in QUICK))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["check", "status", "detail", "seconds"]
    assert SUMMARY.match(lines[-1]).groups()[:3] == ("3", "0", "0"), lines[-1]


def test_cli_probe_package_option(tmp_path):
    original, migrated = gpt2_pair(tmp_path, "orig.py", "after.py")
    result = probe_cli(original, migrated, "--check", "logits_no_cache", "--package", "transformers.models.gpt2")
    assert result.exit_code == 0, result.output
    assert SUMMARY.match(result.stdout.splitlines()[-1]).groups()[:3] == ("1", "0", "0")


def test_cli_probe_setup_error_is_one_line_and_exit_2(tmp_path):
    original, migrated = gpt2_pair(tmp_path, "orig.py", "after.py")
    result = probe_cli(original, migrated)
    assert result.exit_code == 2, result.output
    assert result.stdout.splitlines() == [result.stdout.splitlines()[-1]]  # no table, just the summary
    assert re.fullmatch(r"probe: set-up error, no check ran \(\d+\.\d s\)", result.stdout.strip())
    errors = result.stderr.splitlines()
    assert len(errors) == 1 and errors[0].startswith("error: probe set-up: cannot tell which transformers package")
    assert "diverged" not in result.output


def test_cli_probe_divergence_exits_1_and_names_the_checks(tmp_path):
    original, migrated = gpt2_pair(tmp_path, "modeling_gpt2.py", "modeling_gpt2.py", edit=drop_the_past)
    result = probe_cli(original, migrated, "--check", "logits_no_cache", "--check", "tuple_cache_stepwise")
    assert result.exit_code == 1, result.output
    assert SUMMARY.match(result.stdout.splitlines()[-1]).groups()[:3] == ("1", "0", "1")
    assert "1 of 2 checks diverged: tuple_cache_stepwise" in result.stderr


# --------------------------------------------------------------------------------------------------------------------
# report: exit status and summary line
# --------------------------------------------------------------------------------------------------------------------


def results_with(*status_list):
    return [CheckResult(f"check{i}", status, "detail") for i, status in enumerate(status_list)]


@pytest.mark.parametrize(
    "status_list, code",
    [
        (("pass", "skip"), 0),
        (("pass", "fail"), 1),
        (("pass", "error"), 1),
        (("pass", "setup-error"), 2),
        (("setup-error", "fail"), 1),
        ((), 0),
    ],
)
def test_exit_status(status_list, code):
    assert exit_status(results_with(*status_list)) == code


def test_summary_line_counts_every_status():
    assert summary_line(results_with("pass", "pass", "skip"), 8.14) == "probe: 2 passed, 1 skipped, 0 diverged (8.1 s)"
    mixed = results_with("pass", "fail", "error", "setup-error", "skip")
    assert summary_line(mixed, 2.0) == "probe: 1 passed, 1 skipped, 2 diverged, 1 set-up error (2.0 s)"
    setup = [CheckResult("setup", "setup-error", "cannot import the original")]
    assert summary_line(setup, 0.31) == "probe: set-up error, no check ran (0.3 s)"


# --------------------------------------------------------------------------------------------------------------------
# A check that raises: a set-up error when the original cannot run it, a divergence when only the migrated fails
# --------------------------------------------------------------------------------------------------------------------

NO_ATTENTIONS = replace_once(
    "        if output_attentions:\n            outputs += (attn_weights,)\n",
    '        if output_attentions:\n            raise NotImplementedError("attention weights are not kept")\n',
)
ATTENTIONS = ["logits_no_cache", "output_attentions"]


def test_check_raising_the_same_in_both_files_is_a_setup_error(tmp_path):
    original, migrated = gpt2_pair(tmp_path, "modeling_gpt2.py", "modeling_gpt2.py", NO_ATTENTIONS, NO_ATTENTIONS)
    results = run_probe(original, migrated, checks=ATTENTIONS)
    assert statuses(results) == {"logits_no_cache": "pass", "output_attentions": "setup-error"}, describe(results)
    assert results[1].detail.startswith("both files raise NotImplementedError: attention weights are not kept")
    assert "not a divergence" in results[1].detail
    assert exit_status(results) == 2


def test_check_raising_only_in_the_migrated_file_is_a_divergence(tmp_path):
    original, migrated = gpt2_pair(tmp_path, "modeling_gpt2.py", "modeling_gpt2.py", NO_ATTENTIONS)
    results = run_probe(original, migrated, checks=ATTENTIONS)
    assert statuses(results) == {"logits_no_cache": "pass", "output_attentions": "error"}, describe(results)
    assert results[1].detail.startswith("NotImplementedError: attention weights are not kept")
    assert "the original alone runs this check" in results[1].detail
    assert exit_status(results) == 1


def test_check_raising_only_in_the_original_is_a_setup_error(tmp_path):
    original, migrated = gpt2_pair(tmp_path, "modeling_gpt2.py", "modeling_gpt2.py", None, NO_ATTENTIONS)
    results = run_probe(original, migrated, checks=ATTENTIONS)
    assert statuses(results) == {"logits_no_cache": "pass", "output_attentions": "setup-error"}, describe(results)
    assert results[1].detail.startswith("the original alone raises NotImplementedError")


def test_cli_setup_errors_of_checks_exit_2_with_the_count_in_the_summary(tmp_path):
    original, migrated = gpt2_pair(tmp_path, "orig.py", "modeling_gpt2.py", NO_ATTENTIONS, NO_ATTENTIONS)
    result = probe_cli(original, migrated, *(f"--check={c}" for c in ATTENTIONS))
    assert result.exit_code == 2, result.output
    assert result.stdout.splitlines()[-1].startswith("probe: 1 passed, 0 skipped, 0 diverged, 1 set-up error (")
    assert "set-up errors (the check cannot run on the original; not divergences): output_attentions" in result.stderr


def test_migrated_only_paths_fail_rather_than_error(tmp_path):
    """The static checks forced on a dynamic-only migration: the original cannot take the path either, but the
    migrated model's crash is the failure being checked for, not a set-up error."""
    original, migrated = gpt2_pair(tmp_path, "modeling_gpt2.py", "modeling_gpt2.py")
    results = run_probe(original, migrated, checks=["static_generate", "static_compile"], static=True)
    assert statuses(results) == {"static_generate": "fail", "static_compile": "fail"}, describe(results)
    assert all(r.detail.startswith("model raised") for r in results), describe(results)


def test_plain_file_with_absolute_imports_needs_no_modeling_name(tmp_path):
    from cachemigrate.probe import load_modeling_module, unload_module

    path = tmp_path / "model.py"
    path.write_text("from transformers import PretrainedConfig\n\n\nclass C(PretrainedConfig):\n    pass\n")
    module = load_modeling_module(path)
    try:
        assert module.__name__.startswith("_cm_") and module.C.__module__ == module.__name__
    finally:
        unload_module(module)


def test_control_runs_ignore_conditions_that_name_the_pair_under_test(tmp_path):
    """A condition may look at the migrated side (needs_static does); in the control runs, where both sides are
    one file, it must not turn the check into a skip that would make a crash in both files look like a divergence."""
    from cachemigrate.probe import REGISTRY, check

    @check(lambda probe: None if probe.orig is not probe.migr else "both sides are one file")
    def example_crashing_check(probe):
        """A check whose body no model can run."""
        probe.pair()
        raise RuntimeError("no such path")

    try:
        original, migrated = gpt2_pair(tmp_path, "modeling_gpt2.py", "modeling_gpt2.py")
        [result] = run_probe(original, migrated, checks=["example_crashing_check"])
    finally:
        del REGISTRY["example_crashing_check"]
    assert result.status == "setup-error", result.detail
    assert result.detail.startswith("both files raise RuntimeError: no such path")


def test_a_causal_head_taking_encoder_states_is_probed_as_a_decoder():
    """Bert's LM head (or base model, in a file without a head) keeps no cache unless config.is_decoder: the
    decoder-only checks set it; GPT-style heads without encoder inputs keep their config."""
    from cachemigrate.probe.models import ModelClasses
    from cachemigrate.probe.seq2seq import decoder_changes

    class Head:
        def forward(self, input_ids=None, past_key_values=None, encoder_hidden_states=None):
            pass

    class Plain:
        def forward(self, input_ids=None, past_key_values=None):
            pass

    assert decoder_changes(ModelClasses(object, Head, object, "m")) == {"is_decoder": True}
    assert decoder_changes(ModelClasses(object, Plain, object, "m")) == {}
    # a file without a head: its base model, when it takes encoder states; not the base of an encoder-decoder head
    assert decoder_changes(ModelClasses(object, None, Head, "m")) == {"is_decoder": True}
    assert decoder_changes(ModelClasses(object, None, Plain, "m")) == {}
    assert decoder_changes(ModelClasses(object, None, Head, "m", seq2seq_class=Plain)) == {}
