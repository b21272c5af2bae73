"""CM911: a migrated file that reads a config attribute transformers 5 no longer sets by default (``pad_token_id``,
``tie_word_embeddings``...) while its config class does not set it gets a note saying what to add; the note's claim
and its fix are checked on the 5.x runtime itself."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from cachemigrate.cli.main import main
from cachemigrate.diagnostics import COMPANION_REMOVED, CONFIG_DEFAULT
from cachemigrate.proof.companions import companion_notes
from cachemigrate.rules.eras import config_defaults, removed_imports

REPO = Path(__file__).resolve().parent.parent
TF5 = os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python")

MODELING = '''\
from {source} import ToyConfig


class ToyPreTrainedModel(PreTrainedModel):
    config_class = ToyConfig


class ToyModel(ToyPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.tied = getattr(config, "tie_word_embeddings", True)

    def forward(self, input_ids):
        if self.config.is_decoder:
            return input_ids
        return self.config.bos_token_id
'''

CONFIG = '''\
from transformers import PretrainedConfig


class ToyConfig({base}):
    model_type = "toy"
    is_decoder = True

    def __init__(self, vocab_size=8, bos_token_id=1, **kwargs):
        self.vocab_size = vocab_size
        super().__init__(bos_token_id=bos_token_id, **kwargs)
'''


def _notes(tmp_path: Path, source: str = ".configuration_toy", base: str = "PretrainedConfig", era: str = "5",
           config: str = CONFIG):  # fmt: skip
    (tmp_path / "configuration_toy.py").write_text(config.format(base=base))
    path = tmp_path / "modeling_toy.py"
    defaults, runtime = config_defaults(era)
    return companion_notes(str(path), MODELING.format(source=source), era, defaults, runtime, removed_imports(era))


def test_a_read_the_config_class_does_not_set_is_noted_at_its_line(tmp_path):
    """`pad_token_id` is read and not set: a note at the read. `bos_token_id` goes to super().__init__,
    `is_decoder` is a class attribute, `tie_word_embeddings` is read through getattr with a default: none noted."""
    [note] = _notes(tmp_path)
    assert note.code == CONFIG_DEFAULT
    assert (note.line, note.column) == (11, 28)  # 1-based, at `config`
    assert "`config.pad_token_id`" in note.message and "5.0 and later (era 5 runs there)" in note.message
    assert "`ToyConfig` (configuration_toy.py)" in note.message
    assert "Add `pad_token_id=None` to `ToyConfig.__init__`" in note.message


def test_a_tied_weights_mapping_is_a_read_of_tie_word_embeddings(tmp_path):
    """5.x ties `_tied_weights_keys` only when `config.tie_word_embeddings` is true, and no longer sets it: a
    mapping (what CM420 writes) with a config class that does not set it gets a note at the mapping; a list (4.x's,
    which 5.x does not read) or a config class that sets it, none. tests/test_tied_weights_runtimes.py shows 5.25.0
    leaving such a model untied."""
    (tmp_path / "configuration_toy.py").write_text(CONFIG.format(base="PretrainedConfig"))
    path = tmp_path / "modeling_toy.py"
    defaults, runtime = config_defaults("5")
    mapping = '    _tied_weights_keys = {"out.weight": "embed.weight"}\n'
    code = MODELING.format(source=".configuration_toy").replace("    config_class = ToyConfig\n", mapping, 1)
    code = code.replace(
        "class ToyModel(ToyPreTrainedModel):\n", "class ToyModel(ToyPreTrainedModel):\n    config_class = ToyConfig\n"
    )
    notes = [
        n for n in companion_notes(str(path), code, "5", defaults, runtime, ()) if "_tied_weights_keys" in n.message
    ]
    line = code.splitlines().index(mapping.rstrip("\n")) + 1
    assert [(n.code, n.line, n.column) for n in notes] == [(CONFIG_DEFAULT, line, 5)]
    assert "ties the parameters of `_tied_weights_keys` only when `config.tie_word_embeddings` is true" in (
        notes[0].message
    )
    assert "Add `tie_word_embeddings=True` to `ToyConfig.__init__`" in notes[0].message
    as_list = code.replace(mapping, '    _tied_weights_keys = ["out.weight"]\n')
    assert not [
        n for n in companion_notes(str(path), as_list, "5", defaults, runtime, ()) if "_tied_weights_keys" in n.message
    ]
    fixed = CONFIG.replace("bos_token_id=1, **kwargs", "bos_token_id=1, tie_word_embeddings=True, **kwargs")
    fixed = fixed.replace("super().__init__(", "super().__init__(tie_word_embeddings=tie_word_embeddings, ")
    (tmp_path / "configuration_toy.py").write_text(fixed.format(base="PretrainedConfig"))
    assert not [
        n for n in companion_notes(str(path), code, "5", defaults, runtime, ()) if "_tied_weights_keys" in n.message
    ]


def test_a_companion_imported_by_an_absolute_name_is_read_too(tmp_path):
    [note] = _notes(tmp_path, source="configuration_toy")
    assert "`config.pad_token_id`" in note.message


def test_no_guess_about_a_config_class_of_another_kind_or_an_era_that_keeps_the_defaults(tmp_path):
    assert _notes(tmp_path, base="LlamaConfig") == []  # its base may set it: not guessed
    assert config_defaults("4.56") == ({}, "")
    assert _notes(tmp_path, era="4.56") == []
    assert _notes(tmp_path, era="portable")  # portable runs on 5.x as well


def test_a_companion_that_imports_what_5x_removed_is_named_at_the_config_import(tmp_path):
    """`configuration_*.py` files import `transformers.onnx` for their ONNX export config; 5.x has no such module,
    so the package would not import: a note at the modeling file's import of the config, naming the line."""
    onnx = "from transformers.onnx import OnnxConfig\n" + CONFIG
    notes = _notes(tmp_path, config=onnx)
    assert [n.code for n in notes] == [COMPANION_REMOVED, CONFIG_DEFAULT]
    assert (notes[0].line, notes[0].column) == (1, 1)
    assert "configuration_toy.py:1, the module this file takes its config from, imports `transformers.onnx`" in (
        notes[0].message
    )
    assert [n.code for n in _notes(tmp_path, config=onnx, era="portable")] == [COMPANION_REMOVED, CONFIG_DEFAULT]
    assert _notes(tmp_path, config=onnx, era="4.56") == []


def test_the_command_line_notes_it_without_failing_the_file(tmp_path):
    """tinyfork migrated for era 5 with its config no longer passing `pad_token_id` on, and its model reading it:
    migrated all the same (a note, not a refusal), the note printed; era 4.56 says nothing."""
    fork = tmp_path / "tinyfork"
    shutil.copytree(REPO / "fixtures" / "tinyfork" / "tinyfork", fork)
    config = fork / "configuration_tinyfork.py"
    config.write_text(config.read_text().replace("            pad_token_id=pad_token_id,\n", ""))
    modeling = fork / "modeling_tinyfork.py"
    text = modeling.read_text()
    anchor = "        super().__init__(config)\n"
    assert anchor in text
    modeling.write_text(text.replace(anchor, anchor + "        self.pad = config.pad_token_id\n", 1))
    runner = CliRunner()
    result = runner.invoke(main, ["migrate", "--era", "5", "--check", str(modeling)])
    assert result.exit_code == 1, result.output  # would change: migrated, not failed
    assert f": {CONFIG_DEFAULT} note: the file reads `config.pad_token_id`" in result.output
    assert "would migrate" in result.output
    earlier = runner.invoke(main, ["migrate", "--era", "4.56", "--check", str(modeling)])
    assert CONFIG_DEFAULT not in earlier.output


@pytest.mark.runtimes
def test_on_5x_the_read_fails_as_the_note_says_the_fix_it_names_works_and_onnx_is_gone(tmp_path):
    if not Path(TF5).is_file():
        pytest.skip("no transformers 5.x venv (bench/runtimes.py builds it)")
    (tmp_path / "configuration_toy.py").write_text(CONFIG.format(base="PretrainedConfig"))
    fixed = CONFIG.replace("bos_token_id=1, **kwargs", "bos_token_id=1, pad_token_id=None, **kwargs")
    fixed = fixed.replace("super().__init__(", "super().__init__(pad_token_id=pad_token_id, ")
    (tmp_path / "configuration_fixed.py").write_text(fixed.format(base="PretrainedConfig"))
    script = (
        "import configuration_toy as a, configuration_fixed as b\n"
        "try:\n    a.ToyConfig().pad_token_id\n    print('read')\n"
        "except AttributeError:\n    print('AttributeError')\n"
        "print(b.ToyConfig().pad_token_id)\n"
        "import importlib.util\nprint(importlib.util.find_spec('transformers.onnx') is None)\n"
    )
    done = subprocess.run([TF5, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["AttributeError", "None", "True"], done.stderr  # and no transformers.onnx
