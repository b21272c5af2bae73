"""CM915: a migrated file whose config class is transformers' own, one that 5.x forces an attribute of
(``T5Config.tie_word_embeddings`` is always True there), and that reads it, gets a note at the read with what to read
instead; the data behind it (``[changed.forced_config]`` of era 5) and the advice are checked on the runtimes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from cachemigrate.cli.main import main
from cachemigrate.diagnostics import FORCED_CONFIG
from cachemigrate.proof.forced_config import forced_config_notes
from cachemigrate.rules.eras import forced_config

REPO = Path(__file__).resolve().parent.parent
TF5 = os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python")

MODELING = """\
{imports}


class SeqPreTrainedModel(PreTrainedModel):
    config_class = {cls}


class SeqForGeneration(SeqPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.model_dim = config.d_model

    def forward(self, hidden):
        if self.config.tie_word_embeddings:
            hidden = hidden * self.model_dim**-0.5
        return hidden
"""


def _notes(folder: Path, imports: str, cls: str = "T5Config", era: str = "5"):
    path = folder / "modeling_seq.py"
    forced, runtime = forced_config(era)
    return forced_config_notes(str(path), MODELING.format(imports=imports, cls=cls), era, forced, runtime)


def test_a_read_of_a_forced_attribute_of_the_library_class_is_noted_with_where_it_is_kept(tmp_path):
    for era in ("5", "portable"):
        notes = _notes(tmp_path, "from transformers import PreTrainedModel, T5Config", era=era)
        assert [(n.code, n.line) for n in notes] == [(FORCED_CONFIG, 14)]
        message = notes[0].message
        assert "`T5Config`, transformers' own config class (imported at line 1)" in message
        assert "5.0 and later" in message and f"era {era} runs there" in message
        assert 'read `getattr(config, "scale_decoder_outputs", config.tie_word_embeddings)`' in message
    dotted = (
        "from transformers import PreTrainedModel\nfrom transformers.models.mt5.configuration_mt5 import MT5Config"
    )
    (note,) = _notes(tmp_path, dotted, cls="MT5Config")
    assert (
        note.line == 15 and "`MT5Config` keeps no copy of it: give the model a config class of its own" in note.message
    )


def test_no_note_for_an_own_config_class_another_class_or_an_era_whose_runtime_keeps_the_value(tmp_path):
    (tmp_path / "configuration_t5.py").write_text("class T5Config:\n    pass\n")
    assert _notes(tmp_path, "from .configuration_t5 import T5Config") == []  # the user's copy, beside the file
    assert _notes(tmp_path, "from transformers import BartConfig as T5Config") == []  # aliased, not forced
    assert _notes(tmp_path, "from transformers import T5Config", era="4.56") == []
    defined = "from transformers import PretrainedConfig\n\n\nclass T5Config(PretrainedConfig):\n    pass"
    assert _notes(tmp_path, defined) == []
    lone = tmp_path / "inside"
    lone.mkdir()  # a relative import with nothing beside the file: transformers' package's own module
    assert [n.code for n in _notes(lone, "from .configuration_t5 import T5Config")] == [FORCED_CONFIG]


def test_the_command_line_notes_it_and_migrates_the_file(tmp_path):
    fork = tmp_path / "tinyfork"
    shutil.copytree(REPO / "fixtures" / "tinyfork" / "tinyfork", fork)
    modeling = fork / "modeling_tinyfork.py"
    text = modeling.read_text()
    old_import, anchor = "from .configuration_tinyfork import TinyForkConfig\n", "        super().__init__(config)\n"
    assert old_import in text and anchor in text
    text = text.replace(old_import, "from transformers import T5Config as TinyForkConfig\n")
    modeling.write_text(text.replace(anchor, anchor + "        self.tied = config.tie_word_embeddings\n", 1))
    runner = CliRunner()
    result = runner.invoke(main, ["migrate", "--era", "5", "--check", str(modeling)])
    assert result.exit_code == 1, result.output  # would change: migrated, not failed
    assert f"{FORCED_CONFIG} note: the file reads `config.tie_word_embeddings` of `T5Config`" in result.output
    assert "would migrate" in result.output
    assert FORCED_CONFIG not in runner.invoke(main, ["migrate", "--era", "4.56", "--check", str(modeling)]).output


SCRIPT = """
import json, sys
import transformers
spec = json.loads(sys.argv[1])
seen = {}
for name in spec["classes"]:
    cls = getattr(transformers, name)
    config = cls(tie_word_embeddings=False)
    kept = spec["kept_in"].get(name)
    seen[name] = [config.tie_word_embeddings, getattr(config, kept, config.tie_word_embeddings) if kept else None]
print(json.dumps(seen))
"""


@pytest.mark.runtimes
def test_on_5x_the_classes_force_it_and_the_advice_reads_the_saved_value(tmp_path):
    """Each class of the data forces the value on 5.x and keeps what it was given where the data says; the read the
    note advises gives the saved value on 5.x and on this 4.x runtime alike."""
    import json
    import sys

    if not Path(TF5).is_file():
        pytest.skip("no transformers 5.x venv (bench/runtimes.py builds it)")
    spec = forced_config("5")[0]["tie_word_embeddings"]
    done = subprocess.run([TF5, "-c", SCRIPT, json.dumps(spec)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    for name in spec["classes"]:
        forced, kept = seen[name]
        assert forced is True, name
        assert kept is (False if name in spec["kept_in"] else None), name
    here = {"classes": ["T5Config", "MT5Config"], "kept_in": {"T5Config": "scale_decoder_outputs"}}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(here)], capture_output=True, text=True, timeout=600
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"T5Config": [False, False], "MT5Config": [False, None]}
