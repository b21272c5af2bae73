"""A package whose attention lives in a sibling module (MPT-style ``attention.py`` beside the modeling file): the
files are not migrated one by one, since half of the migration would hand a Cache to code that indexes a tuple (or
update a cache at layer None). Both files are left unchanged, each with a diagnostic saying what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from cachemigrate.engine import Options, migrate_source

TINYFORK = Path(__file__).resolve().parent.parent / "fixtures" / "tinyfork" / "tinyfork" / "modeling_tinyfork.py"


def _split() -> tuple[str, str]:
    """The bundled fork cut in two: its attention class in ``attention.py``, the rest importing it from there."""
    code = TINYFORK.read_text()
    start, end = code.index("class TinyForkAttention("), code.index("class TinyForkMLP(")
    header = code[:start]
    attention = header + code[start:end].rstrip() + "\n"
    modeling = header + "from .attention import TinyForkAttention\n\n\n" + code[end:]
    return attention, modeling


def _migrate(code, ruleset, path):
    return migrate_source(code, ruleset, Options(line_length=119), path=path)


def test_the_bundled_fork_in_one_file_migrates(ruleset_452):
    assert _migrate(TINYFORK.read_text(), ruleset_452, "modeling_tinyfork.py").status == "migrated"


def test_a_modeling_file_whose_attention_is_imported_from_a_sibling_module_is_refused_naming_it(ruleset_452):
    _, modeling = _split()
    result = _migrate(modeling, ruleset_452, "modeling_tinyfork.py")
    assert result.status == "failed" and result.migrated == modeling
    [diagnostic] = result.diagnostics
    assert diagnostic.code == "CM903"
    assert "`TinyForkAttention` (from `.attention`), defined in another module of its package" in diagnostic.message
    assert "move those classes into this file" in diagnostic.message


@pytest.mark.parametrize("imported", ["TinyForkConfig", "BaseModelOutputWithPast"])
def test_configs_and_outputs_from_siblings_are_not_taken_for_the_attention(ruleset_452, imported):
    _, modeling = _split()
    code = modeling.replace("from .attention import TinyForkAttention\n", f"from .attention import {imported}\n")
    [diagnostic] = _migrate(code, ruleset_452, "modeling_tinyfork.py").diagnostics
    assert "another module of its package" not in diagnostic.message


def test_an_attention_file_without_the_model_that_builds_it_is_left_unchanged(ruleset_452):
    attention, _ = _split()
    result = _migrate(attention, ruleset_452, "attention.py")
    assert result.status == "failed" and result.migrated == attention
    [diagnostic] = result.diagnostics
    assert diagnostic.code == "CM903" and "TinyForkAttention" in diagnostic.message
    assert "no model of the file" in diagnostic.message
