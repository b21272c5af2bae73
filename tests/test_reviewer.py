"""Every fixture's diff read the way a reviewer's linters read it: what held in ``before`` still holds in ``after``.

Each pair of ``fixtures/<era>/**/``: ``*before.py`` and its ``*after.py`` (the exact output the rule and scenario
tests check, at their width, 119). Where the original passes a check, the migrated file must pass it too:

- imports sorted and formatted as isort would (ruff ``I001``);
- the width kept: ``black --check -l 119``;
- in the whole-tier scenarios (``fixtures/<era>/<name>/``, not one rule's ``CM*`` folder, whose output is one step
  of a migration: a flag one rule sets is read by another), no dead code: no unused import (``F401``), no local
  assigned and never read (``F841``), nothing defined twice (``F811``).

ruff is in the ``test`` extra; black is a dependency. Each tool runs once over all the files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
WIDTH = 119  # the tests' Options(line_length=119)
RULES = ("I001", "F401", "F841", "F811")
WHOLE = ("F401", "F841", "F811")  # read on whole migrations only
PAIRS = [
    (before, before.with_name(before.name[: -len("before.py")] + "after.py"))
    for before in sorted((REPO / "fixtures").rglob("*before.py"))
    if before.with_name(before.name[: -len("before.py")] + "after.py").is_file()
]


def _tool(name: str) -> str:
    found = shutil.which(name) or str(Path(sys.executable).with_name(name))
    if not Path(found).is_file():
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return found


@pytest.fixture(scope="module")
def ruff_codes() -> dict[Path, set[str]]:
    """Per file, the codes of RULES that ruff reports."""
    files = [str(p) for pair in PAIRS for p in pair]
    command = [_tool("ruff"), "check", "--isolated", "--line-length", str(WIDTH), "--select", ",".join(RULES)]
    done = subprocess.run([*command, "--output-format", "json", *files], capture_output=True, text=True)
    found: dict[Path, set[str]] = {Path(f): set() for f in files}
    for item in json.loads(done.stdout or "[]"):
        found[Path(item["filename"])].add(item["code"])
    return found


def test_there_are_pairs_to_read():
    assert len(PAIRS) > 50


@pytest.mark.parametrize("code", RULES)
def test_what_ruff_accepts_in_the_original_it_accepts_in_the_migrated_file(ruff_codes, code):
    pairs = [(b, a) for b, a in PAIRS if code not in WHOLE or not b.parent.name.startswith("CM")]
    regressed = [
        str(after.relative_to(REPO))
        for before, after in pairs
        if code not in ruff_codes[before] and code in ruff_codes[after]
    ]
    assert regressed == [], f"ruff {code} fails on these migrated fixtures, not on their originals"


def test_the_migrated_file_keeps_the_width_black_accepted():
    black = _tool("black")
    files = [str(p) for pair in PAIRS for p in pair]
    done = subprocess.run([black, "--check", "-l", str(WIDTH), *files], capture_output=True, text=True)
    failing = {Path(line.split(" ", 2)[2]) for line in done.stderr.splitlines() if line.startswith("would reformat ")}
    regressed = [str(after.relative_to(REPO)) for before, after in PAIRS if before not in failing and after in failing]
    assert regressed == [], "black -l 119 reformats these migrated fixtures, not their originals"
