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


def _absolute(code: str) -> str:
    """The remote-code folder's style: its own modules imported by their bare names."""
    for name in ("attention", "configuration_tinyfork"):
        code = code.replace(f"from .{name} import", f"from {name} import")
    return code


def test_a_sibling_imported_by_its_bare_name_is_named_as_the_relative_one_is(ruleset_452):
    """`from attention import TinyForkAttention` beside `from configuration_tinyfork import TinyForkConfig`: the
    same diagnostic as for `from .attention import ...` (it said the layers were handed the past under names that
    are not cache names)."""
    _, modeling = _split()
    relative = _migrate(modeling, ruleset_452, "modeling_tinyfork.py").diagnostics
    code = _absolute(modeling)
    assert "from attention import TinyForkAttention" in code and "from .attention" not in code
    result = _migrate(code, ruleset_452, "modeling_tinyfork.py")
    assert result.status == "failed" and result.migrated == code
    [diagnostic] = result.diagnostics
    assert (diagnostic.code, diagnostic.line) == (relative[0].code, relative[0].line)
    assert diagnostic.message == relative[0].message.replace("(from `.attention`)", "(from `attention`)")


@pytest.mark.parametrize("library", ["transformers", "torch", "collections"])
def test_a_class_from_a_library_imported_by_its_bare_name_is_no_sibling(ruleset_452, library):
    """In the same folder-style file, a class imported from a library (or the standard library) is not said to be
    defined in another module of the package."""
    _, modeling = _split()
    code = _absolute(modeling).replace("from attention import", f"from {library} import")
    [diagnostic] = _migrate(code, ruleset_452, "modeling_tinyfork.py").diagnostics
    assert "another module of its package" not in diagnostic.message
