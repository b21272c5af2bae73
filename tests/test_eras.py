"""Eras that extend another (`extends` in era.toml): what the light-weight era reader (cachemigrate.rules.eras, no libcst)
says about them must agree with the full rule set the engine loads."""

import shutil
from pathlib import Path

import pytest

from cachemigrate.rules import eras
from cachemigrate.rules.loader import load_ruleset

REPO = Path(__file__).resolve().parent.parent
INHERITING = [era for era in eras.available_eras() if eras.lineage(era)[1:]]


def test_some_builtin_era_extends_another():
    assert INHERITING, "expected eras such as 4.56 and 5 to extend 4.52"


@pytest.mark.parametrize("era", INHERITING)
def test_an_era_that_extends_another_has_its_cache_names(era):
    """The prefilter reads these: an empty tuple would call every legacy file 'nothing to migrate'."""
    names = eras.cache_names(era)
    assert names and set(names) == set(load_ruleset(era).era.cache_names)


def test_the_fingerprint_of_an_era_changes_with_a_rule_of_the_era_it_extends(tmp_path):
    root = tmp_path / "rules"
    shutil.copytree(REPO / "rules", root)
    child = next(era for era in eras.available_eras(root) if eras.lineage(era, root)[1:])
    parent = eras.lineage(child, root)[1]
    before = eras.fingerprint(child, root=root)
    rule = sorted((root / parent).glob("CM0*.toml"))[0]
    rule.write_text(rule.read_text() + "\n# edited\n")
    eras._era_table.cache_clear()
    assert eras.fingerprint(child, root=root) != before


@pytest.mark.parametrize(
    "version, expected",
    [("4.51.3", "4.52"), ("4.57.6", "4.56"), ("5.24.0", "5"), ("6.0.0", "5"), ("3.0.0", "4.52"), (None, "5")],
)
def test_the_era_for_a_transformers_version(version, expected):
    """Inside a runtime range, that era; above every range the newest below; below all, the oldest; never the
    portable target (it is only chosen by name)."""
    assert eras.era_for_version(version) == expected
