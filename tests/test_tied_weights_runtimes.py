"""The tied weights of migrated files, built on the runtimes themselves: each fixture of CM420 and CM443 (a
`_tied_weights_keys` list, and `_tie_weights` calling `_tie_or_clone_weights`) is built on transformers 4.51.3 as
written, then migrated by CM420 and CM443 and built on 5.x (era 5) and on 4.51.3, 4.57.6 and 5.x (portable), with
`config.tie_word_embeddings` true and false: the same parameter names share one Parameter, and no others
(tests/tied_groups.py). The file as written does not build on 5.x at all (a list fails in `post_init`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.engine import Options, apply_rules
from cachemigrate.facts.analysis import analyze
from cachemigrate.rules.loader import load_ruleset

REPO = Path(__file__).resolve().parent.parent
GROUPS = REPO / "tests" / "tied_groups.py"
TF4576 = Path(os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"))
TF5 = Path(os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"))
RAISES = REPO / "fixtures" / "5" / "CM420" / "raises_before.py"  # never built tied on 4.x: tested on its own
FIXTURES = sorted(set((REPO / "fixtures" / "5" / "CM420").glob("*before.py")) - {RAISES}) + [
    REPO / "fixtures/5/CM443/before.py",
    REPO / "fixtures/5/CM427/before.py",
]
RUNTIMES = {"5": [TF5], "portable": [Path(sys.executable), TF4576, TF5]}

pytestmark = pytest.mark.runtimes


def _migrated(era: str, path: Path) -> str:
    rules = load_ruleset(era)
    module = cst.parse_module(path.read_text())
    chosen = [r for r in rules.rules if r.id in ("CM420", "CM427", "CM443")]
    new, applied, diagnostics = apply_rules(
        module,
        analyze(module, rules.era.cache_names),
        chosen,
        rules.era,
        str(path),
        Options(line_length=119),
    )
    assert diagnostics == [] and applied.get("CM420"), (
        applied,
        [str(d) for d in diagnostics],
    )
    return new.code


def _groups(python: Path, paths: list[Path]) -> dict:
    """The tied groups of every file, built in one run of ``python``."""
    done = subprocess.run(
        [str(python), str(GROUPS), *map(str, paths)],
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def originals() -> dict:
    return _groups(Path(sys.executable), FIXTURES)  # 4.51.3: the files as written


@pytest.mark.parametrize("era", sorted(RUNTIMES))
def test_migrated_ties_are_the_originals_on_every_runtime_of_the_era(era, originals, tmp_path):
    missing = [str(p) for p in RUNTIMES[era] if not p.is_file()]
    if missing:
        pytest.skip(f"no runtime at {missing} (bench/runtimes.py builds them)")
    migrated = {}
    for fixture in FIXTURES:
        expected = originals[str(fixture)]
        assert isinstance(expected, dict), expected
        assert any(expected[k] for k in expected if k.endswith("/True")), fixture  # the fixture ties something
        path = tmp_path / f"{fixture.parent.name}_{fixture.name}"
        path.write_text(_migrated(era, fixture))
        migrated[str(path)] = str(fixture)
    for python in RUNTIMES[era]:
        found = _groups(python, [Path(p) for p in migrated])
        for path, fixture in migrated.items():
            expected = {k: v for k, v in originals[fixture].items() if not k.endswith("/None")}
            assert {k: v for k, v in found[path].items() if not k.endswith("/None")} == expected, (python, fixture)
            unset = {k: v for k, v in found[path].items() if k.endswith("/None")}
            if python == TF5:  # 5.x no longer sets tie_word_embeddings, and ties the mapping only when it is true:
                # what was built tied stays tied, nothing more (CM911 tells the user to set it in the config)
                assert unset == {k.replace("/False", "/None"): v for k, v in found[path].items() if "/False" in k}
            else:  # 4.x: true by default
                assert unset == {k.replace("/True", "/None"): v for k, v in found[path].items() if "/True" in k}


def test_the_files_as_written_fail_on_5x(originals):
    """A list fails in `post_init`; a head without `_tied_weights_keys` builds, untied (4.51.3 tied it)."""
    if not TF5.is_file():
        pytest.skip(f"no runtime at {TF5}")
    found = _groups(TF5, FIXTURES)
    for fixture in FIXTURES:
        if "    _tied_weights_keys = [" in fixture.read_text():
            assert found[str(fixture)] == "AttributeError: 'list' object has no attribute 'keys'", fixture
        elif "def tie_weights(self):" in fixture.read_text():  # what CM427 rewrites
            assert found[str(fixture)].endswith("unexpected keyword argument 'recompute_mapping'"), fixture
        elif "get_output_embeddings" not in fixture.read_text() and "_tie_weights" not in fixture.read_text():
            # shared only by construction (a module handed to the stacks): one object on every release
            assert found[str(fixture)] == originals[str(fixture)], fixture
        elif "LinnetForCausalLM" not in fixture.read_text():  # untied on 5.x where 4.51.3 tied
            assert isinstance(found[str(fixture)], dict) and found[str(fixture)] != originals[str(fixture)], fixture
        else:
            assert found[str(fixture)]["LinnetForCausalLM/True"] == [], fixture
            assert originals[str(fixture)]["LinnetForCausalLM/True"] == [["head.weight", "trunk.tokens.weight"]]


def _run(python: Path, script: str) -> str:
    done = subprocess.run([str(python), "-c", script], check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def _loader(path: Path) -> str:
    return (
        "import importlib.util, json, sys, tempfile, torch\n"
        "from transformers import PretrainedConfig\n"
        f"spec = importlib.util.spec_from_file_location('fixture', {str(path)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
    )


def test_a_tie_weights_override_without_the_5x_keywords_does_not_build_on_5x():
    """What CM427 rewrites (fixtures/5/CM427/before.py): 5.x's post_init calls the override with keywords."""
    if not TF5.is_file():
        pytest.skip(f"no runtime at {TF5}")
    script = _loader(REPO / "fixtures" / "5" / "CM427" / "before.py") + (
        "try:\n"
        "    module.PipitForCausalLM(PretrainedConfig(vocab_size=5, d_model=4, tie_word_embeddings=False))\n"
        "except TypeError as exc:\n"
        "    print(exc)\n"
    )
    assert _run(TF5, script).endswith("tie_weights() got an unexpected keyword argument 'recompute_mapping'")


@pytest.mark.parametrize("era", sorted(RUNTIMES))
def test_a_migrated_override_keeps_its_ties_through_save_and_load(era, tmp_path):
    """CM427 and CM420 over fixtures/5/CM427/before.py, saved and loaded back with `from_pretrained` on each runtime
    of the era: 5.x assigns each loaded parameter anew, then calls the override with the missing keys; the head is
    the words again, nothing is reported missing, and the logits are those before saving."""
    path = tmp_path / "pipit.py"
    path.write_text(_migrated(era, REPO / "fixtures" / "5" / "CM427" / "before.py"))
    script = _loader(path) + (
        "torch.manual_seed(0)\n"
        "config = PretrainedConfig(vocab_size=11, d_model=8, tie_word_embeddings=True)\n"
        "model = module.PipitForCausalLM(config).eval()\n"
        "ids = torch.tensor([[1, 2, 3]])\n"
        "with tempfile.TemporaryDirectory() as folder:\n"
        "    model.save_pretrained(folder)\n"
        "    loaded, info = module.PipitForCausalLM.from_pretrained(folder, config=config, output_loading_info=True)\n"
        "print(json.dumps({\n"
        "    'tied': loaded.out.weight is loaded.body.words.weight,\n"
        "    'missing': sorted(info['missing_keys']),\n"
        "    'same': torch.equal(model(ids), loaded.eval()(ids)),\n"
        "}))\n"
    )
    for python in RUNTIMES[era]:
        if not python.is_file():
            pytest.skip(f"no runtime at {python}")
        found = json.loads(_run(python, script).splitlines()[-1])
        assert found == {"tied": True, "missing": [], "same": True}, (python, found)


def test_a_head_whose_default_input_embeddings_raise_is_never_tied(tmp_path):
    """fixtures/5/CM420/raises_before.py: on 4.51.3 and 4.57.6 as written, `tie_word_embeddings` true fails in
    `post_init` (NotImplementedError) and false builds untied; migrated, each 4.x runtime of the era does the same, and
    5.x builds it untied either way (its empty mapping), where the file as written builds untied too."""
    script = lambda path: _loader(path) + (  # noqa: E731 - one script per file
        "found = {}\n"
        "for tie in (True, False):\n"
        "    config = PretrainedConfig(vocab_size=11, d_model=8, tie_word_embeddings=tie)\n"
        "    try:\n"
        "        model = module.StiltForMaskedLM(config)\n"
        "    except NotImplementedError:\n"
        "        found[str(tie)] = 'NotImplementedError'\n"
        "        continue\n"
        "    by_id = {}\n"
        "    for name, parameter in model.named_parameters(remove_duplicate=False):\n"
        "        by_id.setdefault(id(parameter), []).append(name)\n"
        "    found[str(tie)] = sorted(sorted(n) for n in by_id.values() if len(n) > 1)\n"
        "print(json.dumps(found))\n"
    )
    original = {"True": "NotImplementedError", "False": []}
    assert json.loads(_run(Path(sys.executable), script(RAISES)).splitlines()[-1]) == original
    for era, pythons in RUNTIMES.items():
        path = tmp_path / f"raises_{era}.py"
        path.write_text(_migrated(era, RAISES))
        for python in pythons:
            if not python.is_file():
                pytest.skip(f"no runtime at {python}")
            found = json.loads(_run(python, script(path)).splitlines()[-1])
            assert found == ({"True": [], "False": []} if python == TF5 else original), (era, python, found)
