"""The era parity census (bench/corpus_eras.py): the share per release and era counts the reachable files, a file
that migrates in one era and not in another is listed with the refusing era's diagnostic, and a real file goes
through every era (the toy fork, each era's rule set: `corpus`, slow)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import corpus_eras  # noqa: E402
from corpuskit.migrating import Migration  # noqa: E402

TOY = REPO / "fixtures" / "tinyfork" / "tinyfork" / "modeling_tinyfork.py"


def _cell(era: str, relative: str, status: str, diagnostics=()) -> corpus_eras.Cell:
    return corpus_eras.Cell(era, Migration("9.9", relative, relative, status, False, [], list(diagnostics)))


def test_a_file_that_migrates_in_one_era_only_is_listed_with_the_diagnostic_of_the_other():
    refusal = "12:5 CM900 `past` is used as a tuple cache and no rule rewrites this idiom"
    cells = [
        _cell("4.52", "models/a/modeling_a.py", "migrated"),
        _cell("5", "models/a/modeling_a.py", "failed", [refusal]),
        _cell("4.52", "models/b/modeling_b.py", "migrated"),
        _cell("5", "models/b/modeling_b.py", "migrated"),
        _cell("4.52", "models/c/modeling_c.py", "clean", ["3:1 CM299 cache code not reachable"]),
        _cell("5", "models/c/modeling_c.py", "clean", ["3:1 CM299 cache code not reachable"]),
    ]
    result = corpus_eras.census(cells, ["9.9"], ["4.52", "5"])
    assert result["table"][("9.9", "4.52")] == {"files": 3, "reachable": 2, "migrated": 2, "errors": 0}
    assert result["table"][("9.9", "5")] == {"files": 3, "reachable": 2, "migrated": 1, "errors": 0}
    report = corpus_eras.render(result, ["9.9"], ["4.52", "5"], "python bench/corpus_eras.py", "test", "done")
    assert "| 9.9 | 4.52 | 3 | 2 | 2 | 100% | 0 |" in report and "| 9.9 | 5 | 3 | 2 | 1 | 50% | 0 |" in report
    assert "another (1)" in report
    split = [line for line in report.splitlines() if "models/a/modeling_a.py" in line]
    assert split == [f"| 9.9 | models/a/modeling_a.py | 4.52 | 5 | CM900 | {refusal} |"]
    assert "modeling_b.py" not in report and "modeling_c.py" not in report


@pytest.mark.corpus
def test_the_toy_fork_migrates_in_every_era_and_a_clean_file_is_answered_once(tmp_path):
    from cachemigrate.rules.eras import available_eras

    report, lines = tmp_path / "eras.md", tmp_path / "eras.jsonl"
    package = tmp_path / "transformers" / "models"
    (package / "tinyfork").mkdir(parents=True)
    (package / "tinyfork" / "modeling_tinyfork.py").write_bytes(TOY.read_bytes())
    (package / "plain").mkdir()
    (package / "plain" / "modeling_plain.py").write_text("import torch\n\n\ndef f(x):\n    return x\n")
    (tmp_path / "transformers" / "__init__.py").write_text('__version__ = "9.9.9"\n')
    eras = ",".join(available_eras())
    assert corpus_eras.main([str(tmp_path), "--eras", eras, "--out", str(report), "--json", str(lines)]) == 0
    text = report.read_text()
    for era in available_eras():
        assert f"| 9.9.9 | {era} | 1 | 1 | 1 | 100% | 0 |" in text
    assert "Census complete" in text and "another (0)" in text
    assert len(lines.read_text().splitlines()) == 2 * len(available_eras())
