"""CM425: a migrated `_init_weights` writes parameters through `torch.nn.init`, so 5.x's `from_pretrained` (which
runs `_init_weights` again on modules with a buffer it did not load, and guards only `torch.nn.init`) keeps what it
loaded; a model built from its config draws the same numbers as the original's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers

from cachemigrate.engine import migrate_source
from cachemigrate.results import Options
from cachemigrate.rules.loader import load_ruleset

TF5 = os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python")
GPT2 = Path(transformers.__file__).parent / "models" / "gpt2" / "modeling_gpt2.py"

SAVE_AND_LOAD = """
import importlib.util, sys, tempfile, torch
from transformers import GPT2Config
spec = importlib.util.spec_from_file_location("transformers.models.gpt2.modeling_cm425", sys.argv[1])
mod = importlib.util.module_from_spec(spec); sys.modules[spec.name] = mod; spec.loader.exec_module(mod)
torch.manual_seed(0)
model = mod.GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50, n_positions=32)).eval()
with tempfile.TemporaryDirectory() as folder:
    model.save_pretrained(folder)
    again = mod.GPT2LMHeadModel.from_pretrained(folder).eval()
before, after = model.state_dict(), again.state_dict()
print("redrawn:", sorted(k for k in before if not torch.equal(before[k], after[k])))
"""


def _migrated(era: str, tmp_path: Path) -> Path:
    result = migrate_source(GPT2.read_text(), load_ruleset(era), Options(), path=str(GPT2))
    assert result.status == "migrated", result.diagnostics
    out = tmp_path / era / "modeling_gpt2.py"
    out.parent.mkdir(parents=True)
    out.write_text(result.migrated)
    return out


def _build(path: Path, name: str) -> dict:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"transformers.models.gpt2.{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50, n_positions=32)
    return module.GPT2LMHeadModel(config).state_dict()


@pytest.mark.parametrize("era", ["5", "portable"])
def test_a_model_built_from_its_config_draws_what_the_original_drew(era, tmp_path):
    migrated = _migrated(era, tmp_path)
    assert "torch.nn.init.normal_(\n                    p, mean=0.0" in migrated.read_text()
    assert ".data.normal_(" not in migrated.read_text()
    original, ours = _build(GPT2, f"cm425_original_{era}"), _build(migrated, f"cm425_migrated_{era}")
    assert original.keys() == ours.keys()
    assert all(torch.equal(original[k], ours[k]) for k in original)


@pytest.mark.runtimes
@pytest.mark.parametrize("era", ["5", "portable"])
def test_what_from_pretrained_loads_on_5x_is_not_drawn_again(era, tmp_path):
    if not shutil.which(TF5) and not Path(TF5).exists():
        pytest.skip("no transformers 5.x venv (bench/runtimes.py builds it)")
    script = tmp_path / "save_and_load.py"
    script.write_text(SAVE_AND_LOAD)
    migrated = _migrated(era, tmp_path)
    run = subprocess.run([TF5, str(script), str(migrated)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "redrawn: []" in run.stdout
    # without CM425 the same migration loses the attentions' output projections
    without = migrated.with_name("without_cm425.py")
    text = migrated.read_text().replace("torch.nn.init.normal_(\n                    p, ", "p.data.normal_(\n                    ")
    assert text != migrated.read_text()
    without.write_text(text)
    run = subprocess.run([TF5, str(script), str(without)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "c_proj.weight" in run.stdout.split("redrawn:")[1]
