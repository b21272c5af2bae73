"""Whole-tier scenarios: every fixture folder of an era that is not one rule's (``fixtures/4.52/full``,
``checkpointing_in_the_loop``...) is a complete model file that the whole tier turns from ``before.py`` into
``after.py`` with no diagnostic; ``after.py`` is clean on a second run; each ``*_nomatch.py`` beside them is
refused and left byte for byte as it was. A folder named ``*_static`` runs the static tier, the others the dynamic
one. What a scenario shows beyond that (which rules it exercises, the diagnostic a near-miss gets, how the migrated
model behaves) is tested beside it, in its own module."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
ERAS = ["4.52"]
SCENARIOS = sorted(
    folder
    for era in ERAS
    for folder in (FIXTURES / era).iterdir()
    if folder.is_dir() and not folder.name.startswith("CM")
)


def options(folder: Path) -> Options:
    return Options(tier="static" if folder.name.endswith("_static") else "dynamic", line_length=119)


@functools.cache
def ruleset(era: str):
    return load_ruleset(era)


def migrate(folder: Path, path: Path):
    """``path`` (a file of the scenario ``folder``) through the whole tier of the folder's era; the modules of the
    scenarios use it too."""
    return migrate_source(path.read_text(), ruleset(folder.parent.name), options(folder), path=path.name)


def test_the_scenarios_are_found():
    assert {"full", "full_static", "checkpointing_in_the_loop", "presents_before_checkpointing"} <= {
        folder.name for folder in SCENARIOS
    }
    for folder in SCENARIOS:
        assert (folder / "before.py").is_file() and (folder / "after.py").is_file(), folder


@pytest.mark.parametrize("folder", SCENARIOS, ids=lambda f: f"{f.parent.name}/{f.name}")
def test_the_whole_tier_turns_before_into_after(folder):
    result = migrate(folder, folder / "before.py")
    assert [str(d) for d in result.diagnostics] == []
    assert result.status == "migrated" and result.migrated == (folder / "after.py").read_text()


@pytest.mark.parametrize("folder", SCENARIOS, ids=lambda f: f"{f.parent.name}/{f.name}")
def test_the_migrated_scenario_is_clean_on_a_second_run(folder):
    after = folder / "after.py"
    result = migrate(folder, after)
    assert result.status == "clean" and not result.changed
    assert result.migrated == after.read_text() and result.diagnostics == []


NOMATCH = [path for folder in SCENARIOS for path in sorted(folder.glob("*_nomatch.py"))]


@pytest.mark.parametrize("path", NOMATCH, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_near_miss_is_refused_and_left_unchanged(path):
    result = migrate(path.parent, path)
    assert result.status == "failed" and result.migrated == path.read_text()
    assert result.diagnostics
