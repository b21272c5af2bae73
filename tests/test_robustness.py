"""The CI subset of bench/robustness.py: eleven modeling files of the installed transformers 4.51.3, spanning what
the engine does with them (migrated, refused with diagnostics, nothing to migrate), checked for no internal
error, outputs that compile, idempotence and byte-identical unchanged files. The full run (every PyTorch modeling
file of 4.51.3 and of a 5.x wheel) is ``python bench/robustness.py [tree-or-wheel] -j 2``."""

import dataclasses
import importlib.util
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SUBSET = ("ctrl", "decision_transformer", "bart", "bert", "codegen", "cpmant", "fsmt", "rag", "reformer", "t5", "llama", "vit")


@pytest.fixture(scope="module")
def robustness():
    spec = importlib.util.spec_from_file_location("robustness", REPO / "bench" / "robustness.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["robustness"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    module._init("4.52", "dynamic", 119)
    yield module
    del sys.modules["robustness"]


def test_a_subset_of_transformers_4_51_3_keeps_every_property(robustness):
    files = robustness.modeling_files(robustness.installed_transformers())
    chosen = {name: data for name, data in files.items() if name.split("/")[-2] in SUBSET}
    assert len(chosen) == len(SUBSET)
    outcomes = [robustness.check(name, data) for name, data in chosen.items()]
    assert {o.name: o.violations for o in outcomes if o.violations} == {}
    statuses = {o.name.split("/")[-2]: o.status for o in outcomes}
    assert statuses["ctrl"] == statuses["decision_transformer"] == statuses["bart"] == statuses["cpmant"] == "migrated"
    assert statuses["fsmt"] == "migrated"  # a dict per layer (CM640): compiles, idempotent
    assert statuses["llama"] == statuses["vit"] == "clean"
    assert statuses["rag"] == "migrated"  # a head over a library seq2seq model, beams reordered by its own function
    assert statuses["reformer"] == "failed"  # a refused file (CM903: its layers take the past under names of their own): byte-identical
    prefiltered = {o.name.split("/")[-2] for o in outcomes if o.prefiltered}
    assert "vit" in prefiltered and not prefiltered & {"ctrl", "decision_transformer", "bart", "bert", "codegen"}


def test_the_checks_catch_what_they_look_for(robustness, monkeypatch):
    from cachemigrate.cli.runner import migrate_bytes

    def appends_a_line(data, ruleset, options, path):  # never idempotent, and the second line does not compile
        result = migrate_bytes(data, ruleset, options, path)
        result.migrated = result.original + ("x = (\n" if result.original.endswith("y = 1\n") else "y = 1\n")
        return result

    monkeypatch.setattr(robustness, "migrate_bytes", appends_a_line)
    [changes] = robustness.check("m.py", b"a = 1\n").violations
    assert changes.startswith("second run changes it")
    broken = robustness.check("m.py", b"y = 1\n").violations
    assert broken[0].startswith("does not compile")

    def raises(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(robustness, "migrate_bytes", raises)
    outcome = robustness.check("m.py", b"a = 1\n")
    assert outcome.status == "error" and "RuntimeError: boom" in outcome.violations[0]

    def says_failed(data, ruleset, options, path):  # an engine that refuses what the prefilter calls clean
        return dataclasses.replace(migrate_bytes(data, ruleset, options, path), status="failed")

    monkeypatch.setattr(robustness, "migrate_bytes", says_failed)
    [skipped] = robustness.check("m.py", b"def f(past_key_values):\n    return past_key_values.x\n").violations
    assert skipped == "the prefilter skipped it, but the engine says failed"
    assert robustness.check("m.py", b"def f(past_key_values):\n    return past_key_values[0]\n").violations == []


def test_modeling_files_reads_a_wheel_and_skips_tf_and_flax(robustness, tmp_path):
    wheel = tmp_path / "transformers-9.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name in ("gpt2/modeling_gpt2.py", "gpt2/modeling_tf_gpt2.py", "gpt2/modeling_flax_gpt2.py",
                     "gpt2/configuration_gpt2.py", "modeling_utils.py"):  # fmt: skip
            archive.writestr(f"transformers/models/{name}" if "/" in name else f"transformers/{name}", "x = 1\n")
    assert list(robustness.modeling_files(wheel)) == ["transformers/models/gpt2/modeling_gpt2.py"]
    assert robustness.main([str(wheel)]) == 0
