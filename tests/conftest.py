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


@pytest.fixture(autouse=True)
def _own_result_cache(tmp_path_factory, monkeypatch):
    """Each test gets an empty result cache of its own (runs in subprocesses inherit it): no test answers from
    another's results, and nothing is written to the user's ~/.cache."""
    monkeypatch.setenv("CACHEMIGRATE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


def summary_of(stderr: str) -> dict[str, int]:
    """The rows of migrate's closing summary table: {"would migrate": 1, "nothing to migrate": 3, ...}."""
    import re

    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("cachemigrate: ") and " file" in line]
    assert starts, f"no summary table in:\n{stderr}"
    rows = {}
    for line in lines[starts[-1] + 1 :]:
        found = re.match(r"^  (\S.*?)\s{2,}(\d+)$", line)
        if found:
            rows[found.group(1)] = int(found.group(2))
    return rows
