"""Code that edits a cache outside a model (rules CM500-CM504, cachemigrate/facts/consumers.py): the helper modules
of fixtures/cache_edits/ migrate for every era, and the migrated helpers, handed a DynamicCache of the same tensors,
give bit for bit what the originals give on a tuple past (and the same on a tuple). Here on transformers 4.51.3 for
the eras whose code that release runs (4.52 and portable); tests/test_cache_edits_runtimes.py runs 4.56, 5 and
portable on 4.57.6 and 5.x. Near misses are refused at their line."""

import pytest
from cache_edit_calls import CALLS, FIXTURES

from cachemigrate.engine import Options, migrate_source
from cachemigrate.probe.edits import check
from cachemigrate.rules.loader import load_ruleset

OPTIONS = Options(line_length=119)
ERAS = ("4.52", "4.56", "5", "portable")


def migrate(path, era):
    return migrate_source(path.read_text(), load_ruleset(era), OPTIONS, path=str(path))


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("fixture", sorted(CALLS))
def test_every_helper_module_migrates_for_every_era(fixture, era):
    result = migrate(FIXTURES / fixture, era)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    assert not [d for d in result.diagnostics if d.code in ("CM900", "CM901", "CM903")]
    again = migrate_source(result.migrated, load_ruleset(era), OPTIONS, path=fixture)
    assert again.status == "clean"  # a second run finds nothing left to migrate


@pytest.mark.parametrize("era", ("4.52", "portable"))
@pytest.mark.parametrize("fixture", sorted(CALLS))
def test_migrated_helpers_on_a_cache_match_the_originals_on_a_tuple(fixture, era, tmp_path):
    migrated = tmp_path / "migrated.py"
    migrated.write_text(migrate(FIXTURES / fixture, era).migrated)
    results = check(str(FIXTURES / fixture), str(migrated), CALLS[fixture])
    assert [r for r in results if not r["ok"]] == []
    assert len(results) == len(CALLS[fixture])


def test_the_check_tells_a_wrong_edit_apart(tmp_path):
    """A migrated rollback that keeps one position too many is caught (the comparison can fail)."""
    wrong = tmp_path / "wrong.py"
    wrong.write_text(
        migrate(FIXTURES / "rollback/speculative.py", "4.52").migrated.replace(".crop(end_pos)", ".crop(end_pos + 1)")
    )
    [result] = check(
        str(FIXTURES / "rollback/speculative.py"), str(wrong), [{"function": "rollback", "args": ["PAST", 5]}]
    )
    assert not result["ok"] and "tensor 0" in result["detail"]


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(
    "fixture, code, line, words",
    [
        (
            "nearmiss/head_dim.py",
            "CM503",
            7,
            "`k[:, :, :, :width]` slices axis 3 of the cached tensor, not its sequence",
        ),
        (
            "nearmiss/heads_read.py",
            "CM500",
            7,
            "`past_key_values[0][0].shape[1]` reads the heads of a layer's cached tensor",
        ),
        (
            "nearmiss/not_a_past.py",
            "CM900",
            12,
            "`past` is used as a tuple in trim (`for t in past`), but never as a past",
        ),
        ("nearmiss/hidden_states.py", "CM903", 7, "trim_states is not shown to edit a past either"),
    ],
)
def test_near_misses_are_refused_at_their_line(fixture, code, line, words, era):
    result = migrate(FIXTURES / fixture, era)
    assert result.status == "failed" and result.migrated == (FIXTURES / fixture).read_text()
    assert [(d.code, d.line) for d in result.diagnostics] == [(code, line)]
    assert words in result.diagnostics[0].message


def test_consumers_are_the_functions_that_read_a_past_or_hand_it_to_one_that_does():
    import libcst as cst

    from cachemigrate.facts.analysis import analyze

    era = load_ruleset("4.52").era
    info = analyze(cst.parse_module((FIXTURES / "count/inspect_cache.py").read_text()), era.cache_names)
    # describe reads only len(past), and hands the past to cache_stats
    assert info.roles["consumer"] == [
        "cache_stats",
        "layer_norms",
        "total_positions",
        "describe",
        "last_layer_means",
        "key_norms",
        "value_dtypes",
    ]
    info = analyze(cst.parse_module((FIXTURES / "nearmiss/not_a_past.py").read_text()), era.cache_names)
    assert info.roles["consumer"] == ["rollback"] and [fn.qualname for fn, _, _ in info.unproven] == ["trim"]
    # one that only counts the layers needs nothing, beside a consumer
    info = analyze(cst.parse_module((FIXTURES / "rollback/speculative.py").read_text()), era.cache_names)
    assert info.roles["consumer"][-1] == "should_verify" and info.unproven == []


@pytest.mark.parametrize("end", range(-9, 10))
def test_the_vendored_crop_keeps_what_the_slice_keeps(end):
    """crop_cache_to (era 5 and portable, rules/vendor/cache_crop.py) on 4.51.3's DynamicCache, every end."""
    import importlib.util

    from transformers import DynamicCache

    from cachemigrate.probe.edits import cache_tensors, make_past

    path = FIXTURES.parent.parent / "rules" / "vendor" / "cache_crop.py"
    spec = importlib.util.spec_from_file_location("cachemigrate_vendor_cache_crop", path)
    vendor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vendor)
    cache = DynamicCache.from_legacy_cache(make_past())
    vendor.crop_cache_to(cache, end)
    for (k, v), (ck, cv) in zip(make_past(), cache_tensors(cache)):
        assert torch_equal(k[:, :, :end], ck) and torch_equal(v[:, :, :end], cv)


def torch_equal(a, b) -> bool:
    import torch

    return a.shape == b.shape and torch.equal(a, b)


def test_a_helper_that_only_counts_the_layers_has_nothing_to_migrate():
    code = "def depth(past_key_values):\n    return len(past_key_values)\n"
    for era in ERAS:
        result = migrate_source(code, load_ruleset(era), OPTIONS, path="depth.py")
        assert (result.status, result.migrated, result.diagnostics) == ("clean", code, [])
