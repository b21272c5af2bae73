"""CM406: a class that builds its own `lm_head` and never said what it ties stays untied on transformers 4.54+,
whose `get_output_embeddings` default returns `self.lm_head` (and `tie_weights()` ties it, the config's
`tie_word_embeddings` being True by default). The fixture's classes are built on each runtime the rule is for."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import libcst as cst

from cachemigrate.engine import apply_rules
from cachemigrate.facts.analysis import analyze
from cachemigrate.results import Options
from cachemigrate.rules.loader import load_ruleset

REPO = Path(__file__).resolve().parent.parent
BEFORE = REPO / "fixtures" / "4.56" / "CM406" / "before.py"
RUNTIMES = {
    "4.57.6": os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"),
    "5.25.0": os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"),
}

TIED = """
import importlib.util, sys
from transformers import PretrainedConfig
spec = importlib.util.spec_from_file_location("cm406_fixture", sys.argv[1])
mod = importlib.util.module_from_spec(spec); sys.modules[spec.name] = mod; spec.loader.exec_module(mod)
model = mod.HeronCausalModel(PretrainedConfig(vocab_size=20, d_model=8))
model.tie_weights()
print("tied:", model.lm_head.weight is model.embed.weight)
"""


def _apply(era: str) -> str:
    """The fixture with era ``era``'s CM406 applied alone (the fixture has no cache, so a whole migration would
    leave it clean); the text unchanged where the era has no CM406."""
    ruleset = load_ruleset(era)
    rules = [rule for rule in ruleset.rules if rule.id == "CM406"]
    module = cst.parse_module(BEFORE.read_text())
    new, _, _ = apply_rules(
        module, analyze(module, ruleset.era.cache_names), rules, ruleset.era, str(BEFORE), Options()
    )
    return new.code


@pytest.mark.parametrize("era", ["4.56", "5", "portable"])
def test_every_era_from_4_56_writes_the_untied_default(era):
    migrated = _apply(era)
    assert migrated.count("def get_output_embeddings(self):") == 2  # HeronTiedModel's own, and the new one
    assert migrated.index("return None") > migrated.index("class HeronCausalModel")
    assert migrated.index("return None") < migrated.index("class HeronTiedModel")


def test_era_4_52_does_not():
    assert _apply("4.52") == BEFORE.read_text()


@pytest.mark.runtimes
@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_the_head_stays_untied_on_the_runtime(runtime, tmp_path):
    python = RUNTIMES[runtime]
    if not Path(python).exists():
        pytest.skip(f"no transformers {runtime} venv (bench/runtimes.py builds it)")
    era = "4.56" if runtime.startswith("4.") else "5"
    migrated = tmp_path / "migrated.py"
    migrated.write_text(_apply(era))
    script = tmp_path / "tied.py"
    script.write_text(TIED)
    answers = {}
    for name, path in (("before", BEFORE), ("migrated", migrated)):
        run = subprocess.run([python, str(script), str(path)], capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        answers[name] = run.stdout.strip().splitlines()[-1]
    assert answers["migrated"] == "tied: False"
    if runtime == "4.57.6":  # the default this rule undoes: the unmigrated class is tied there
        assert answers["before"] == "tied: True"
