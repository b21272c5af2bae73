"""The corpus report command (bench/corpus.py): a fast subset of the installed transformers, migrated and probed,
and the parts it is built from (sources, families)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from corpuskit import families as family_table  # noqa: E402
from corpuskit.markdown import Row, summary  # noqa: E402
from corpuskit.migrating import Migration  # noqa: E402
from corpuskit.probing import ProbeOutcome  # noqa: E402
from corpuskit.sources import read_source  # noqa: E402

TOY = REPO / "fixtures" / "tinyfork" / "tinyfork" / "modeling_tinyfork.py"


@pytest.mark.corpus
def test_a_subset_of_the_installed_release_is_migrated_probed_and_reported(tmp_path):
    pytest.importorskip("transformers")
    report, rows = tmp_path / "corpus.md", tmp_path / "rows.json"
    command = [sys.executable, str(REPO / "bench" / "corpus.py"), "installed", "--only", "ctrl", "llama", "vit"]
    done = subprocess.run(
        [*command, "-j", "1", "--out", str(report), "--json", str(rows)], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr
    data = {row["file"]: row for row in json.loads(rows.read_text())}
    # ctrl: a tuple-cache file of the presents family, migrated, every probe check passes or does not apply
    ctrl = data["models/ctrl/modeling_ctrl.py"]
    assert ctrl["family"] == "presents" and ctrl["status"] == "migrated"
    assert ctrl["probe"]["verdict"] == "pass"
    statuses = {status for status, _ in ctrl["probe"]["checks"].values()}
    assert statuses <= {"pass", "skip"} and "pass" in statuses
    assert ctrl["probe"]["checks"]["generate_beam"][0] == "pass"
    # llama of this release is on the Cache API: no row, counted as clean; vit has no cache at all
    assert set(data) == {"models/ctrl/modeling_ctrl.py"}
    text = report.read_text()
    assert "| `models/ctrl/modeling_ctrl.py` | dynamic |" in text and "migrated, probe passes" in text
    family = next(line for line in text.splitlines() if line.startswith("| 4.") and "| presents |" in line)
    assert family.split("|")[3:10] == [" 1 ", " 1 ", " 1 ", " 0 ", " 0 ", " 0 ", " 0 "]
    release = next(line for line in text.splitlines() if line.startswith("| 4.") and line.count("|") == 5)
    assert release.split("|")[2:5] == [" 1 ", " 1 ", " 0 "]  # one Cache-API file, clean, no false positive


def test_a_wheel_is_read_in_place_with_its_release_and_frameworks(tmp_path):
    wheel = tmp_path / "transformers-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("transformers/__init__.py", '__version__ = "9.9.9"\n')
        archive.writestr("transformers/models/switch_transformers/__init__.py", '__version__ = "0.0"\n')
        archive.writestr("transformers/models/toy/modeling_toy.py", TOY.read_text())
        archive.writestr("transformers/models/toy/modeling_tf_toy.py", "import tensorflow\n")
        archive.writestr("transformers/models/deprecated/old/modeling_old.py", "x = 1\n")
        archive.writestr("transformers/models/toy/configuration_toy.py", "x = 1\n")
    version, files = read_source(wheel)
    assert version == "9.9.9"
    found = {f.relative: f for f in files}
    assert set(found) == {
        "models/toy/modeling_toy.py",
        "models/toy/modeling_tf_toy.py",
        "models/deprecated/old/modeling_old.py",
    }
    assert found["models/toy/modeling_tf_toy.py"].framework and not found["models/toy/modeling_toy.py"].framework
    assert found["models/deprecated/old/modeling_old.py"].model == "old"
    assert found["models/deprecated/old/modeling_old.py"].package == "transformers.models.deprecated.old"


def test_families_are_data_and_a_model_in_two_families_is_an_error(tmp_path):
    table = tmp_path / "families.toml"
    table.write_text('[family.mine]\ntitle = "Mine"\ndecoder = true\nmodels = ["toy"]\n')
    families = family_table.load(table)
    assert family_table.family_of("toy", families) == "mine" and families["mine"].decoder
    assert family_table.family_of("other", families) == family_table.UNCLASSIFIED
    table.write_text('[family.a]\nmodels = ["toy"]\n[family.b]\nmodels = ["toy"]\n')
    with pytest.raises(SystemExit, match="toy is in both a and b"):
        family_table.load(table)


def test_the_shipped_family_table_loads_and_names_the_census_families():
    families = family_table.load()
    decoder = {name for name, family in families.items() if family.decoder}
    assert {"presents", "next_decoder_cache", "layouts"} <= decoder
    assert family_table.family_of("gpt2", families) == "presents"
    assert family_table.family_of("bart", families) == "encoder_decoder"


def test_a_probe_that_cannot_run_is_not_counted_as_a_divergence():
    def row(name: str, status: str, probe: ProbeOutcome | None) -> Row:
        migration = Migration("9.9.9", f"models/{name}/modeling_{name}.py", name, status, False, [], [])
        return Row(migration, "mine", probe)

    rows = [
        row("a", "migrated", ProbeOutcome({"tuple_cache_stepwise": ("pass", "")})),
        row("b", "migrated", ProbeOutcome({"logits_no_cache": ("fail", "logits differ")})),
        row("c", "migrated", ProbeOutcome({"setup": ("setup-error", "the original cannot run")})),
        row("d", "migrated", ProbeOutcome({}, "the probe did not finish in 9s")),
        row("e", "failed", None),
    ]
    families = {"mine": family_table.Family("mine", "Mine", True, frozenset("abcde"))}
    line = summary(rows, families, ["9.9.9"])[-1]
    # files, migrated, passing, diverged, could not run, refused, internal error
    assert line.split("|")[3:10] == [" 5 ", " 4 ", " 1 ", " 1 ", " 2 ", " 1 ", " 0 "]


def test_a_check_the_original_cannot_run_does_not_apply_but_a_probe_that_compared_nothing_proves_nothing():
    stepwise = {"tuple_cache_stepwise": ("pass", "")}
    compared = ProbeOutcome({**stepwise, "encoder_decoder_model": ("setup-error", "both raise")})
    seq2seq = ProbeOutcome(
        {"tuple_cache_stepwise": ("skip", "driven by the cross_* checks"), "cross_tuple_stepwise": ("pass", "")}
    )
    nothing = ProbeOutcome({"logits_no_cache": ("setup-error", "both raise"), "sdpa": ("skip", "no sdpa")})
    only_skips = ProbeOutcome({"sdpa": ("skip", "no sdpa")})
    # what the migration changed never ran: the original cannot take a cached step (ESM), whatever else passed
    no_cached_step = ProbeOutcome(
        {"logits_no_cache": ("pass", ""), "tuple_cache_stepwise": ("setup-error", "both raise")}
    )
    diverged = ProbeOutcome({**stepwise, "generate_greedy": ("fail", "tokens differ")})
    assert [p.verdict for p in (compared, seq2seq, nothing, only_skips, no_cached_step, diverged)] == [
        "pass",
        "pass",
        "setup-error",
        "setup-error",
        "setup-error",
        "diverged",
    ]


def test_unreachable_cache_code_has_a_row_and_the_encoder_decoder_goal_counts_it_apart():
    from corpuskit.markdown import goal_lines, render

    def row(name: str, status: str, probe: ProbeOutcome | None, diagnostics=()) -> Row:
        migration = Migration("9.9.9", f"models/{name}/modeling_{name}.py", name, status, False, [], list(diagnostics))
        return Row(migration, "mine", probe)

    unreachable = row("c", "clean", None, ["3:5 CM299 cache code not reachable: ..."])
    untouched = Migration("9.9.9", "models/d/modeling_d.py", "d", "clean", False, [], [])  # no cache at all
    assert unreachable.migration.tuple_cache and not untouched.tuple_cache
    assert unreachable.outcome == "cache code not reachable, left unchanged"
    rows = [row("a", "migrated", ProbeOutcome({"tuple_cache_stepwise": ("pass", "")})), row("b", "failed", None)]
    rows.append(unreachable)
    families = {"mine": family_table.Family("mine", "Mine", False, frozenset("abc"), "encoder-decoder")}
    (line,) = goal_lines(rows, families, ["9.9.9"], "encoder-decoder")
    assert line.startswith("- 9.9.9: 1 of 2 encoder-decoder tuple-cache files (50%) migrate")
    assert "(1 migrate); 1 more left unchanged: no model class reaches their cache code (CM299, exit 0)." in line
    # the summary: 3 files, 1 migrated, 1 passing, 0 diverged, 0 could not run, 1 refused, 0 errors, 1 unreachable
    assert summary(rows, families, ["9.9.9"])[-1].split("|")[3:11] == [
        " 3 ",
        " 1 ",
        " 1 ",
        " 0 ",
        " 0 ",
        " 1 ",
        " 0 ",
        " 1 ",
    ]
    families[family_table.UNCLASSIFIED] = family_table.Family(family_table.UNCLASSIFIED, "-", False, frozenset())
    text = render(rows, [r.migration for r in rows], families, ["9.9.9"], ["logits_no_cache"], "cmd", "settings")
    assert "## Encoder-decoder goal\n\n- 9.9.9: 1 of 2" in text
    assert "Decoder-only goal" not in text  # no file of that goal in the report: no "0 of 0" section
    assert "| `models/c/modeling_c.py` | – | – | CM299 | cache code not reachable, left unchanged |" in text


def test_the_shipped_encoder_decoder_families_count_towards_their_goal():
    families = family_table.load()
    assert families["encoder_decoder"].goal == families["encoder"].goal == "encoder-decoder"
    assert families["presents"].goal == "decoder-only" and families["not_kv"].goal is None
