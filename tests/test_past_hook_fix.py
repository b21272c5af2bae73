"""--fix-past-hook (`fix-past-hook = true`): a `prepare_inputs_for_generation(self, input_ids, past=None, ...)`
written before transformers 4.26 gets its `past` renamed to `past_key_values` (the name generate() passes), `past`
kept as an alias, and the file migrated; without the option it is refused. On the installed transformers the fixed
and migrated model generates the original's tokens, each step after the prompt on the new token only, where the
original ran every step on the whole sequence (its cache was never reused)."""

from __future__ import annotations

import shutil
from pathlib import Path

import libcst as cst
import libcst.matchers as m
import pytest
from click.testing import CliRunner

from cachemigrate.cli.config import ConfigError, load_config
from cachemigrate.cli.main import main
from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset

FOLDER = Path(__file__).resolve().parent.parent / "fixtures" / "remote" / "pasthook"
MODELING = FOLDER / "modeling_pasthook.py"
HOOK = "def prepare_inputs_for_generation(self, input_ids, past=None, attention_mask=None, **kwargs):"


def fixed(code: str, era: str, fix: bool = True):
    return migrate_source(code, load_ruleset(era), Options(line_length=119, fix_past_hook=fix), "modeling_pasthook.py")


def _line(code: str, text: str) -> int:
    [line] = [n for n, line in enumerate(code.splitlines(), 1) if text in line]
    return line


@pytest.mark.parametrize("era", ["4.52", "4.56", "5", "portable"])
def test_the_hook_is_renamed_with_an_alias_and_the_file_migrated(era):
    code = MODELING.read_text()
    result = fixed(code, era)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    [note] = [d for d in result.diagnostics if d.code == "CM913"]
    assert note.line == _line(code, HOOK) and "4.26" in note.message
    [hook] = m.findall(cst.parse_module(result.migrated), m.FunctionDef(name=m.Name("prepare_inputs_for_generation")))
    params = [p.name.value for p in hook.params.params]
    # era 5 adds `cache=None` (the name 5.24 hands the cache as)
    assert params[:4] == ["self", "input_ids", "past_key_values", "attention_mask"] and "past" not in params
    assert '        past_key_values = kwargs.pop("past", past_key_values)\n' in result.migrated
    assert '"past_key_values": past_key_values,' in result.migrated
    names = {n.value for n in m.findall(cst.parse_module(result.migrated), m.Name())}
    assert "past" not in names  # no `past` left as a variable: read through `past_key_values`
    again = migrate_source(result.migrated, load_ruleset(era), Options(line_length=119), "modeling_pasthook.py")
    assert again.status == "clean" and again.migrated == result.migrated


def test_without_the_option_the_hook_is_refused():
    code = MODELING.read_text()
    result = fixed(code, "4.56", fix=False)
    assert result.status == "failed" and result.migrated == code
    [hook] = result.diagnostics
    assert hook.code == "CM900" and hook.line == _line(code, HOOK) and "--fix-past-hook" in hook.message


def test_a_hook_without_kwargs_is_not_fixed_and_says_why():
    code = MODELING.read_text().replace(HOOK, HOOK.replace(", **kwargs", ", use_cache=None"))
    code = code.replace('"use_cache": kwargs.get("use_cache"),', '"use_cache": use_cache,')
    code = code.replace('position_ids = kwargs.get("position_ids", None)', "position_ids = None")
    result = fixed(code, "4.56")
    assert result.status == "failed" and result.migrated == code
    [hook] = result.diagnostics
    assert hook.code == "CM900" and hook.line == _line(code, "def prepare_inputs_for_generation")
    assert "(--fix-past-hook: it takes no `**kwargs` to keep `past` as an alias in)" in hook.message


def test_a_diagnostic_after_the_fix_is_at_the_original_line():
    """A blocker the migration of the fixed file finds below the hook is said at its line in the original (the fix
    inserted one line above it)."""
    code = MODELING.read_text().replace(
        "return tuple(tuple(p.index_select(0, beam_idx) for p in layer_past) for layer_past in past_key_values)",
        "return tuple(tuple(p.index_select(0, beam_idx) for p in layer_past) for layer_past in past_key_values)\n"
        "\n    def shape_of_past(self, past_key_values):\n        return past_key_values[0][0].shape[3]",
    )
    result = fixed(code, "4.56")
    assert result.status == "failed" and result.migrated == code
    lines = {d.line for d in result.diagnostics}
    assert _line(code, "return past_key_values[0][0].shape[3]") in lines, [str(d) for d in result.diagnostics]


def _lengths_per_step(folder: Path):
    """Greedy tokens, and the length of `input_ids` each forward of the head was given."""
    import torch

    from cachemigrate.probe.loading import load_modeling_module

    module = load_modeling_module(folder / "modeling_pasthook.py")
    torch.manual_seed(0)
    model = module.PastHookForCausalLM(module.PastHookConfig()).eval()
    lengths = []
    model.register_forward_pre_hook(
        lambda _, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    ids = torch.randint(3, 99, (1, 5))
    with torch.no_grad():
        tokens = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False)
    return tokens, lengths


def test_the_fixed_model_generates_the_same_tokens_reusing_its_cache(tmp_path):
    import torch

    result = fixed(MODELING.read_text(), "4.52")  # the installed runtime (4.51.3)
    shutil.copytree(FOLDER, tmp_path / "pasthook")
    (tmp_path / "pasthook" / MODELING.name).write_text(result.migrated)
    original_tokens, original_lengths = _lengths_per_step(FOLDER)
    new_tokens, new_lengths = _lengths_per_step(tmp_path / "pasthook")
    assert torch.equal(original_tokens, new_tokens)
    assert original_lengths == [5, 6, 7, 8]  # the original: the whole sequence every step
    assert new_lengths == [5, 1, 1, 1]  # fixed: the prompt, then the new token on the cache


def test_the_option_from_the_command_line_and_from_the_config(tmp_path):
    for name in ("flag", "config"):
        shutil.copytree(FOLDER, tmp_path / name)
    (tmp_path / "config" / "pyproject.toml").write_text("[tool.cachemigrate]\nfix-past-hook = true\n")
    runner = CliRunner()
    base = ["migrate", "--era", "4.56", "--no-cache", "--line-length", "119"]
    flag = runner.invoke(main, [*base, "--fix-past-hook", str(tmp_path / "flag" / MODELING.name)])
    config = runner.invoke(main, [*base, str(tmp_path / "config" / MODELING.name)])
    off = runner.invoke(main, [*base, "--no-fix-past-hook", "--check", str(tmp_path / "config" / MODELING.name)])
    assert flag.exit_code == 0 and config.exit_code == 0, (flag.output, config.output)
    migrated = (tmp_path / "flag" / MODELING.name).read_text()
    assert migrated == (tmp_path / "config" / MODELING.name).read_text() != MODELING.read_text()
    assert off.exit_code == 0  # already migrated: nothing left to do
    (tmp_path / "bad.toml").write_text('[tool.cachemigrate]\nfix-past-hook = "yes"\n')
    with pytest.raises(ConfigError, match="fix-past-hook"):
        load_config(tmp_path / "bad.toml")
