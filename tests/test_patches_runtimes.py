"""The proof for a patch of a library class, on the runtimes its eras are for: the LIBRARY model (GPT-2's tiny causal
LM of transformers; patched by a function set on its attention class, or by a subclass of that attention swapped
into its blocks) runs greedy generation with the original patch on transformers 4.51.3 (this interpreter) and
with the patch migrated for era 4.56 on 4.57.6, for era 5 on the newest 5.x, for portable on both, from the same
weights and prompt (cachemigrate/probe/patches.py, one subprocess per runtime): the tokens are the same, the logits
of the full forward and the scores of every step agree within the cross probe's tolerance (the largest differences
are printed). The original patch on those runtimes runs without its past (the cache comes under another keyword and
its present is taken for the attention weights): its scores differ, silently. Skipped where a runtime is missing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.facts.analysis import analyze
from cachemigrate.facts.patches import find_patches, library_names
from cachemigrate.rules.loader import load_ruleset

REPO = Path(__file__).resolve().parent.parent
# each patch, and the function of it that swaps its attention into the model (None: importing it patches the class)
PATCHES = {
    REPO / "fixtures" / "patches" / "gpt2_forward" / "streaming_attention.py": None,
    REPO / "fixtures" / "patches" / "attention_subclass" / "recency_attention.py": "use_recency_bias",
}
RUNTIMES = {
    "4.57": (os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"), ("4.56", "portable")),
    "5": (os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"), ("5", "portable")),
}

pytestmark = pytest.mark.runtimes


def _worker(python: str, *args: str) -> object:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [python, "-m", "cachemigrate.probe.patches", *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _library(path: Path) -> str:
    module = cst.parse_module(path.read_text())
    info = analyze(module, load_ruleset("4.56").era.cache_names)
    patches = find_patches(module, info.functions)
    if patches:
        return patches[0].library
    [swapped] = info.roles["patch"]  # a subclass of a library attention: the module of its base
    base = info.classes[swapped.split(".")[0]].bases[0]
    return library_names(module)[base].rpartition(".")[0]


def _apply(function: str | None) -> list[str]:
    return ["--apply", function] if function else []


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict:
    """Per patch: (its library module, the folder of what the original computed on this runtime)."""
    found = {}
    for path, apply in PATCHES.items():
        folder = tmp_path_factory.mktemp(path.stem)
        library = _library(path)
        meta = _worker(sys.executable, "record", library, str(folder), str(path), *_apply(apply))
        assert meta["transformers"] == "4.51.3" and meta["patched"], meta
        found[path] = (library, folder)
    return found


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_the_library_model_with_the_migrated_patch_generates_what_it_did_with_the_original(
    runtime, recorded, tmp_path
):
    python, eras = RUNTIMES[runtime]
    if not Path(python).is_file():
        pytest.skip(f"no transformers {runtime} interpreter at {python}")
    for path, (library, folder) in recorded.items():
        migrated = []
        for era in eras:
            result = migrate_source(path.read_text(), load_ruleset(era), Options(line_length=119), path=str(path))
            assert result.status == "migrated", [str(d) for d in result.diagnostics]
            migrated.append(tmp_path / f"{path.stem}_{era.replace('.', '_')}.py")
            migrated[-1].write_text(result.migrated)
        results = _worker(
            python, "replay", library, str(folder), *map(str, migrated), str(path), *_apply(PATCHES[path])
        )
        for era, result in zip((*eras, "original"), results):
            print(path.name, era, runtime, {k: v for k, v in result.items() if k != "patch"})
            assert result["transformers"].startswith(runtime) and result["patched"], result
            assert result["weights"] == {"missing": [], "unexpected": []}
        assert [(era, r["detail"]) for era, r in zip(eras, results) if not r["ok"]] == []
        original = results[-1]
        assert not original["ok"] and "scores" in original["detail"]  # runs, without its past: silently different
