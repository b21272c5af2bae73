"""What the engine refuses before libcst sees a file (cachemigrate.guard): syntax errors where Python puts them, and
expressions nested too deep (100 nested calls, sums of thousands of terms), as diagnostics at the expression's
line, never an internal error or a parse that runs for minutes."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from cachemigrate.source import guard
from cachemigrate.cli.main import main

LEGACY = (Path(__file__).resolve().parent.parent / "fixtures" / "4.52" / "full" / "before.py").read_text()


def migrate(target: Path):
    return CliRunner().invoke(main, ["migrate", "--era", "4.52", str(target)])


def with_helper(tmp_path: Path, expression: str) -> tuple[Path, int]:
    """The legacy fixture plus a function returning ``expression``; returns the file and the expression's line."""
    target = tmp_path / "modeling_deep.py"
    target.write_text(LEGACY + "\n\ndef helper(layer_past):\n    return " + expression + "\n")
    return target, LEGACY.count("\n") + 4


@pytest.mark.parametrize(
    "broken",
    ["x = (1,\ny = layer_past\n", "def f(layer_past:\n    pass\n", "layer_past = [\n", "if layer_past\n    pass\n"],
)
def test_a_syntax_error_is_reported_where_python_reports_it(tmp_path, broken):
    target = tmp_path / "modeling_broken.py"
    target.write_text(broken)
    try:
        compile(broken, str(target), "exec")
    except SyntaxError as exc:
        expected = f"{target}:{exc.lineno}:{exc.offset}: CM902 not valid Python: {exc.msg}"
    result = migrate(target)
    assert result.exit_code == 1, result.output
    assert expected in result.stdout, result.stdout


@pytest.mark.parametrize("kind", ["nested calls", "a long sum", "a sum Python cannot compile"])
def test_an_expression_nested_too_deep_is_a_diagnostic_at_its_line(tmp_path, kind):
    expression = {
        "nested calls": "f(" * 100 + "layer_past" + ")" * 100,
        "a long sum": " + ".join(f"a{i}" for i in range(4_000)) + " + layer_past[0]",
        "a sum Python cannot compile": " + ".join(f"a{i}" for i in range(20_000)) + " + layer_past[0]",
    }[kind]
    target, line = with_helper(tmp_path, expression)
    original = target.read_bytes()
    result = migrate(target)
    assert result.exit_code == 1, result.output
    assert "internal error" not in result.output
    assert f"{target}:{line}:" in result.stdout and ": CM910 this expression " in result.stdout, result.stdout
    assert target.read_bytes() == original


def test_nesting_within_the_limit_is_migrated(tmp_path):
    target, _ = with_helper(tmp_path, "f(" * (guard.MAX_DEPTH - 2) + "x" + ")" * (guard.MAX_DEPTH - 2))
    result = migrate(target)
    assert result.exit_code == 0, result.output
    assert "CM910" not in result.stdout and "DynamicCache" in target.read_text()


def test_a_recursion_error_in_the_engine_is_a_diagnostic(tmp_path, monkeypatch):
    """Should the limit let through more than the engine can take, the file still gets a diagnostic. (The engine's
    walks no longer recurse per level, so nesting within what Python parses does not reach the recursion limit; the
    analysis is made to recurse without end instead.)"""
    import cachemigrate.engine as engine

    def bottomless(*args, **kwargs):
        return bottomless(*args, **kwargs)

    monkeypatch.setattr(engine, "analyze", bottomless)
    target = tmp_path / "modeling_deep.py"
    target.write_text(LEGACY)
    original = target.read_bytes()
    result = migrate(target)
    assert result.exit_code == 1, result.output
    assert "internal error" not in result.output and ": CM910 the file's code is nested too deep" in result.stdout
    assert target.read_bytes() == original


def test_nesting_python_parses_but_past_the_old_limit_is_migrated(tmp_path, monkeypatch):
    """150 nested calls (more than the guard lets through, fewer than Python's parser takes) migrate once the guard
    allows them: no walk of the engine recurses per level."""
    monkeypatch.setattr(guard, "MAX_DEPTH", 10_000)
    target, _ = with_helper(tmp_path, "f(" * 150 + "layer_past" + ")" * 150)
    result = migrate(target)
    assert result.exit_code == 0, result.output
    assert "DynamicCache" in target.read_text()
