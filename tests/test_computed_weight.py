"""CM460: a table only the module's constructor computes, kept out of the checkpoint, is computed in
`_init_weights` too, so a `from_pretrained` that builds the model on the meta device (4.51.3, 4.57.6, 5.25.0) gets it
back; a model built from its config is the same as the original's."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest
import torch

from cachemigrate.engine import Options, apply_rules
from cachemigrate.facts.analysis import analyze
from cachemigrate.facts.computed_weights import computed_weights
from cachemigrate.rules.loader import load_ruleset

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "4.52" / "CM460"
RUNTIMES = {
    "4.51.3": sys.executable,
    "4.57.6": os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"),
    "5.25.0": os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"),
}

SAVE_AND_LOAD = """
import importlib.util, sys, tempfile, torch
spec = importlib.util.spec_from_file_location(sys.argv[2], sys.argv[1])
mod = importlib.util.module_from_spec(spec); sys.modules[spec.name] = mod; spec.loader.exec_module(mod)
torch.manual_seed(0)
model = mod.HeronForScoring(mod.HeronConfig()).eval()
with tempfile.TemporaryDirectory() as folder:
    model.save_pretrained(folder)
    again = mod.HeronForScoring.from_pretrained(folder).eval()
before, after = model.state_dict(), again.state_dict()
changed = sorted(k for k in before if after[k].is_meta or not torch.equal(before[k], after[k]))
print("tensors:", len(before)); print("changed:", changed)
"""

# a checkpoint that holds a table (not the one the constructor computes): what was loaded is kept
LOADED_TABLE = """
import importlib.util, sys, tempfile, torch
from safetensors.torch import load_file, save_file
spec = importlib.util.spec_from_file_location(sys.argv[2], sys.argv[1])
mod = importlib.util.module_from_spec(spec); sys.modules[spec.name] = mod; spec.loader.exec_module(mod)
mod.HeronForScoring._keys_to_ignore_on_save = None
torch.manual_seed(0)
model = mod.HeronForScoring(mod.HeronConfig()).eval()
with tempfile.TemporaryDirectory() as folder:
    model.save_pretrained(folder)
    state = load_file(folder + "/model.safetensors")
    state["body.table.weight"] = state["body.table.weight"] * 2 + 1
    save_file(state, folder + "/model.safetensors", metadata={"format": "pt"})
    again = mod.HeronForScoring.from_pretrained(folder)
print("kept:", torch.equal(again.body.table.weight, model.body.table.weight * 2 + 1))
"""


@pytest.mark.parametrize("era", ["4.52", "4.56", "5", "portable"])
def test_every_era_has_the_rule(era):
    assert "CM460" in {rule.id for rule in load_ruleset(era).rules}


def test_the_facts_name_the_module_and_its_method():
    assert computed_weights(cst.parse_module((FIXTURES / "before.py").read_text())) == {"HeronWaveTable": "_waves"}
    unannotated = cst.parse_module((FIXTURES / "unannotated_before.py").read_text())
    assert computed_weights(unannotated) == {"KestrelRamp": "_init_weight"}
    assert computed_weights(cst.parse_module((FIXTURES / "saved_nomatch.py").read_text())) == {}
    assert computed_weights(cst.parse_module((FIXTURES / "own_code_nomatch.py").read_text())) == {"SnipeGrid": "_grid"}


def _migrated(tmp_path: Path) -> Path:
    ruleset = load_ruleset("4.52")
    rule = next(r for r in ruleset.rules if r.id == "CM460")
    module = cst.parse_module((FIXTURES / "before.py").read_text())
    info = analyze(module, ruleset.era.cache_names)
    new, applied, diagnostics = apply_rules(module, info, [rule], ruleset.era, "before.py", Options(line_length=119))
    assert applied == {"CM460": 1} and not diagnostics
    out = tmp_path / "heron_migrated.py"
    out.write_text(new.code)
    return out


def _state(path: Path, name: str) -> dict:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    return module.HeronForScoring(module.HeronConfig()).state_dict()


def test_a_model_built_from_its_config_is_the_original(tmp_path):
    original, ours = _state(FIXTURES / "before.py", "heron_cm460_original"), _state(_migrated(tmp_path), "heron_cm460")
    assert original.keys() == ours.keys()
    assert all(torch.equal(original[k], ours[k]) for k in original)
    assert original["body.table.weight"].abs().sum() > 0  # the table was computed, not left empty


@pytest.mark.runtimes
@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_from_pretrained_gives_the_table_back(runtime, tmp_path):
    python = RUNTIMES[runtime]
    if not Path(python).exists():
        pytest.skip(f"no transformers {runtime} venv (bench/runtimes.py builds it)")
    script = tmp_path / "save_and_load.py"
    script.write_text(SAVE_AND_LOAD)

    def run(path: Path, name: str) -> str:
        done = subprocess.run([python, str(script), str(path), name], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    migrated = run(_migrated(tmp_path), "heron_cm460")
    assert "tensors: 3" in migrated and "changed: []" in migrated
    # the original file, saved and loaded the same way, loses the table there
    assert "changed: ['body.table.weight']" in run(FIXTURES / "before.py", "heron_cm460_original")


@pytest.mark.runtimes
@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_a_table_the_checkpoint_holds_is_not_computed_again(runtime, tmp_path):
    python = RUNTIMES[runtime]
    if not Path(python).exists():
        pytest.skip(f"no transformers {runtime} venv (bench/runtimes.py builds it)")
    script = tmp_path / "loaded_table.py"
    script.write_text(LOADED_TABLE)
    done = subprocess.run([python, str(script), str(_migrated(tmp_path)), "heron_cm460_loaded"], capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "kept: True" in done.stdout
