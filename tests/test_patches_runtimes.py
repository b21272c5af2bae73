"""The proof for a patch of a library class, on the runtimes its eras are for: the LIBRARY model (the tiny causal LM
of transformers' GPT-2 or Llama, patched by a function set on its attention class, by a subclass of that attention
swapped into its blocks, or by one set in the library module in place of the class) runs greedy generation with the original patch on transformers 4.51.3 (this interpreter)
and with the patch migrated for era 4.56 on 4.57.6, for era 5 on the newest 5.x, for portable on both (and on 4.51.3
where the library passed that patch a Cache already), from the same weights and prompt
(cachemigrate/probe/patches.py, one subprocess per runtime): the tokens are the same, the logits of the full forward
and the scores of every step agree within the cross probe's tolerance (the largest differences are printed).

What fails, as it should: the original patch on the new runtimes runs without its past (the cache comes under
another keyword), silently; so does a patch migrated for era 4.56 on 5.x (`cache=` from 5.24); a portable patch of
the `layer_past` contract on 4.51.3 raises (that release passes it the tuple). Skipped where a runtime is missing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.probe.patch_cross import patch_target
from cachemigrate.rules.loader import load_ruleset

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures" / "patches"
# each patch, and whether 4.51.3 passed the patched attention a Cache already (then portable runs there too)
PATCHES = {
    FIXTURES / "gpt2_forward" / "streaming_attention.py": False,
    FIXTURES / "attention_subclass" / "recency_attention.py": False,
    FIXTURES / "class_assignment" / "tempered_attention.py": False,
    FIXTURES / "llama_forward" / "capped_attention.py": True,
}
RUNTIMES = {
    "4.51": (sys.executable, ("portable",)),
    "4.57": (os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"), ("4.56", "portable")),
    "5": (os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"), ("5", "portable")),
}
OLDER = {"5": "4.56"}  # the era before, run there too: it passes the cache as `cache=`, which 4.56's patch ignores

pytestmark = pytest.mark.runtimes


def _worker(python: str, *args: str) -> object:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    command = [python, "-m", "cachemigrate.probe.patches", *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _apply(function: str | None) -> list[str]:
    return ["--apply", function] if function else []


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict:
    """Per patch: (its library module, its swap function, the folder of what the original computed on 4.51.3)."""
    found = {}
    for path in PATCHES:
        folder = tmp_path_factory.mktemp(path.stem)
        library, apply = patch_target(path)  # what the probe reads off the file: the library module, a swap function
        meta = _worker(sys.executable, "record", library, str(folder), str(path), *_apply(apply))
        assert meta["transformers"] == "4.51.3" and meta["patched"], meta
        found[path] = (library, apply, folder)
    return found


def _migrated(path: Path, era: str, folder: Path) -> Path:
    result = migrate_source(path.read_text(), load_ruleset(era), Options(line_length=119), path=str(path))
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    target = folder / f"{path.stem}_{era.replace('.', '_')}.py"
    target.write_text(result.migrated)
    return target


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_the_library_model_with_the_migrated_patch_generates_what_it_did_with_the_original(
    runtime, recorded, tmp_path
):
    python, eras = RUNTIMES[runtime]
    if not Path(python).is_file():
        pytest.skip(f"no transformers {runtime} interpreter at {python}")
    for path, (library, apply, folder) in recorded.items():
        cache_on_451 = PATCHES[path]
        labels = [*eras, *([OLDER[runtime]] if runtime in OLDER else []), *(["original"] if runtime != "4.51" else [])]
        files = [path if label == "original" else _migrated(path, label, tmp_path) for label in labels]
        results = _worker(python, "replay", library, str(folder), *map(str, files), *_apply(apply))
        by_label = dict(zip(labels, results))
        for label, result in by_label.items():
            print(path.name, label, runtime, {k: v for k, v in result.items() if k != "patch"})
            assert result["transformers"].startswith(runtime) and result["patched"], result
            assert result["weights"] == {"missing": [], "unexpected": []}
        if runtime == "4.51" and not cache_on_451:  # this release passes the patch the tuple: refused, loudly
            assert "this release passes `layer_past`" in by_label["portable"]["detail"]
            continue
        assert [(label, by_label[label]["detail"]) for label in eras if not by_label[label]["ok"]] == []
        for label in ("original", OLDER.get(runtime)):
            if label in by_label:  # runs without its past, silently: the scores differ
                assert not by_label[label]["ok"] and "scores" in by_label[label]["detail"], (label, by_label[label])


def test_cachemigrate_probe_across_runtimes_runs_the_library_model_with_each_patch(tmp_path):
    python = RUNTIMES["4.57"][0]
    if not Path(python).is_file():
        pytest.skip(f"no transformers 4.57 interpreter at {python}")
    path = FIXTURES / "gpt2_forward" / "streaming_attention.py"
    command = [sys.executable, "-m", "cachemigrate", "probe", str(path), str(_migrated(path, "4.56", tmp_path))]
    command += ["--original-python", sys.executable, "--migrated-python", python]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "original on transformers 4.51.3, migrated on transformers 4.57.6" in done.stdout
    assert "the library model patched: GPT2Attention.forward" in done.stdout
    assert "probe: 3 passed, 0 skipped, 0 diverged" in done.stdout
