"""CM461 (eras 4.52, 4.56) and CM420 (eras 5, portable): a model written before 4.31 that shares parameters by
construction (an embedding handed to both stacks) or through `tie_weights` names them, so that `save_pretrained`
(safetensors) of 4.51.3, 4.57.6 and 5.25.0 keeps one of each group instead of raising on "shared tensors", and
`from_pretrained` gives back every tensor."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.engine import Options, apply_rules
from cachemigrate.facts.analysis import analyze
from cachemigrate.rules.loader import load_ruleset

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "4.52" / "CM461" / "before.py"
RUNTIMES = {
    "4.51.3": sys.executable,
    "4.57.6": os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"),
    "5.25.0": os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"),
}
ERA_OF = {"4.51.3": "4.52", "4.57.6": "4.56", "5.25.0": "5"}  # the era each runtime's file is migrated for
RULE_OF = {"4.52": "CM461", "4.56": "CM461", "5": "CM420"}

SAVE_AND_LOAD = """
import importlib.util, sys, tempfile, torch, transformers
spec = importlib.util.spec_from_file_location(sys.argv[2], sys.argv[1])
mod = importlib.util.module_from_spec(spec); sys.modules[spec.name] = mod; spec.loader.exec_module(mod)
class GrebeConfig(transformers.PretrainedConfig):
    model_type = "grebe"
mod.GrebePreTrainedModel.config_class = GrebeConfig
torch.manual_seed(0)
model = mod.GrebeForGeneration(GrebeConfig(vocab_size=30, tie_word_embeddings=True)).eval()
shared = model.model.shared.weight
assert model.model.encoder.embed_tokens.weight is shared  # by construction, on every runtime
print("lm_head tied:", model.lm_head.weight is shared)  # 5.x ties only what a mapping names
with tempfile.TemporaryDirectory() as folder:
    try:
        model.save_pretrained(folder)
    except RuntimeError as error:
        print("save:", str(error).splitlines()[0][:120]); raise SystemExit(0)
    again = mod.GrebeForGeneration.from_pretrained(folder).eval()
before, after = model.state_dict(), again.state_dict()
changed = sorted(k for k in before if after[k].is_meta or not torch.equal(before[k], after[k]))
print("tensors:", len(before)); print("changed:", changed)
print("one parameter:", again.model.decoder.embed_tokens.weight is again.model.shared.weight)
"""


def _migrated(era: str, tmp_path: Path) -> Path:
    ruleset = load_ruleset(era)
    rule = next(r for r in ruleset.rules if r.id == RULE_OF[era])
    module = cst.parse_module(FIXTURE.read_text())
    info = analyze(module, ruleset.era.cache_names)
    new, applied, diagnostics = apply_rules(module, info, [rule], ruleset.era, "before.py", Options(line_length=119))
    assert applied.get(rule.id, 0) >= 1 and not diagnostics
    out = tmp_path / f"grebe_{era.replace('.', '_')}.py"
    out.write_text(new.code)
    return out


def test_era_5_has_the_mapping_not_the_list():
    assert "CM461" in {r.id for r in load_ruleset("4.56").rules}
    for era in ("5", "portable"):
        ruleset = load_ruleset(era)
        assert "CM461" not in {r.id for r in ruleset.rules} and "CM420" in {r.id for r in ruleset.rules}
        assert "CM420" in next(w.because for w in ruleset.withdrawn if w.rule.id == "CM461")


@pytest.mark.runtimes
@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_the_shared_parameters_are_saved_once_and_come_back(runtime, tmp_path):
    python = RUNTIMES[runtime]
    if not Path(python).exists():
        pytest.skip(f"no transformers {runtime} venv (bench/runtimes.py builds it)")
    script = tmp_path / "save_and_load.py"
    script.write_text(SAVE_AND_LOAD)

    def run(path: Path, name: str) -> str:
        done = subprocess.run([python, str(script), str(path), name], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    migrated = run(_migrated(ERA_OF[runtime], tmp_path), "grebe_cm461")
    assert (
        "lm_head tied: True" in migrated and "changed: []" in migrated and "one parameter: True" in migrated
    ), migrated
    # the file as written cannot be saved there (its embedding is handed to both stacks whatever the runtime)
    assert "shared tensors" in run(FIXTURE, "grebe_cm461_original")


HANDED_WEIGHT = Path(__file__).resolve().parent.parent / "fixtures" / "4.52" / "CM462" / "before.py"

SAVE_AND_LOAD_HANDED = """
import importlib.util, sys, tempfile, torch, transformers
spec = importlib.util.spec_from_file_location(sys.argv[2], sys.argv[1])
mod = importlib.util.module_from_spec(spec); sys.modules[spec.name] = mod; spec.loader.exec_module(mod)
class WhimbrelConfig(transformers.PretrainedConfig):
    model_type = "whimbrel"
mod.WhimbrelPreTrainedModel.config_class = WhimbrelConfig
torch.manual_seed(0)
model = mod.WhimbrelModel(WhimbrelConfig(vocab_size=30, d_model=8)).eval()
with tempfile.TemporaryDirectory() as folder:
    model.save_pretrained(folder)
    again = mod.WhimbrelModel.from_pretrained(folder).eval()
before, after = model.state_dict(), again.state_dict()
changed = sorted(k for k in before if after[k].is_meta or not torch.equal(before[k], after[k]))
print("changed:", changed)
print("one parameter:", again.encoder.embed_tokens.weight is again.words.weight)
"""


@pytest.mark.runtimes
@pytest.mark.parametrize("runtime", ["4.51.3", "4.57.6"])
def test_a_weight_handed_by_assignment_is_tied_again_after_loading(runtime, tmp_path):
    python = RUNTIMES[runtime]
    if not Path(python).exists():
        pytest.skip(f"no transformers {runtime} venv (bench/runtimes.py builds it)")
    script = tmp_path / "save_and_load.py"
    script.write_text(SAVE_AND_LOAD_HANDED)
    ruleset = load_ruleset(ERA_OF[runtime])

    def migrated(rule_ids: tuple[str, ...], name: str) -> str:
        module = cst.parse_module(HANDED_WEIGHT.read_text())
        rules = [r for r in ruleset.rules if r.id in rule_ids]
        info = analyze(module, ruleset.era.cache_names)
        new, applied, _ = apply_rules(module, info, rules, ruleset.era, "before.py", Options(line_length=119))
        assert set(applied) == set(rule_ids)
        path = tmp_path / f"{name}.py"
        path.write_text(new.code)
        done = subprocess.run([python, str(script), str(path), name], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    both = migrated(("CM461", "CM462"), "whimbrel_both")
    assert "changed: []" in both and "one parameter: True" in both, both
    # the list alone lets save_pretrained drop the stacks' copies, which from_pretrained then leaves uninitialised
    listed_only = migrated(("CM461",), "whimbrel_listed")
    assert "encoder.embed_tokens.weight" in listed_only.split("changed:")[1].splitlines()[0]
