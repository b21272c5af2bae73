"""CPM-Ant (transformers 4.51.3) through the dynamic tier and the probe: its encoder hands each layer its past in
the call (`past_key_values[i] if past_key_values else None`), its model wraps the encoder with a placeholder of
Nones and a branch on whether there is a past, and it is handed the whole sequence on every cached step.

The file is copied out of the installed transformers at test time (its code is never stored in this repository)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset

pytestmark = pytest.mark.corpus

transformers = pytest.importorskip("transformers")
SOURCE = Path(transformers.__file__).parent / "models" / "cpmant" / "modeling_cpmant.py"
# the cache paths: they only run when the probe steps the model with the whole sequence
MUST_PASS = {
    "logits_no_cache",
    "tuple_cache_stepwise",
    "use_cache_false_with_past",
    "tuple_in_tuple_out",
    "dynamic_cache_in_same_object",
    "output_attentions",
    "return_dict_false",
    "positional_call",
    "jit_trace_tuple",
}


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    ruleset = load_ruleset("4.52")
    folder = tmp_path_factory.mktemp("cpmant")
    original, target = folder / "original" / SOURCE.name, folder / "migrated" / SOURCE.name
    original.parent.mkdir()
    target.parent.mkdir()
    shutil.copy(SOURCE, original)
    result = migrate_source(original.read_text(), ruleset, Options(line_length=119), path=str(original))
    target.write_text(result.migrated)
    return ruleset, original, target, result


def test_cpmant_migrates_and_is_then_clean(migrated):
    ruleset, _, target, result = migrated
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    assert {"CM023", "CM105", "CM106"} <= set(result.applied)
    assert "past_key_values=past_key_values," in result.migrated  # each layer gets the whole cache
    assert "tuple([None] * self.encoder.num_layers)" not in result.migrated
    again = migrate_source(result.migrated, ruleset, Options(line_length=119), path=str(target))
    assert again.status == "clean" and again.migrated == result.migrated


def test_cpmant_probe_runs_its_cache_paths_and_they_are_identical(migrated):
    from cachemigrate.probe import format_table, run_probe

    _, original, target, _ = migrated
    results = {r.name: r for r in run_probe(original, target)}
    table = format_table(list(results.values()))
    assert not {n for n, r in results.items() if r.status in ("fail", "error")}, table
    assert {n for n in MUST_PASS if results[n].status != "pass"} == set(), table
