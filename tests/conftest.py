"""Shared pytest fixtures: repository paths and the built-in 4.52 rule set (loaded once per session)."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return REPO / "fixtures"


@pytest.fixture(scope="session")
def ruleset_452():
    """The built-in rules of era 4.52."""
    from cachemigrate.rules import load_ruleset

    return load_ruleset("4.52")
