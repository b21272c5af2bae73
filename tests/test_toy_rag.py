"""A RAG-style head over a library seq2seq generator (``fixtures/heads/toy_rag``, written for this repo): the generator
built by ``AutoModelForSeq2SeqLM.from_config`` into a local of ``__init__``, each beam decoded against several
passages stacked row by row, ``_reorder_cache`` reordering beams with a function of its own (``_pick_beams``).
It migrates in every era (CM026/CM027 for the reorder, CM117/CM118 for the past handed to the generator), and a
beam search (``bench/toy_rag_beams.py``, the library's ``generate(num_beams=3)``, weights made once on 4.51.3) gives
the original's tokens: eras 4.52 and portable on 4.51.3 (tuples throughout, as the original), 4.56 on 4.57.6, 5 on
5.25.0 and portable on both (``runtimes``; there generate() hands the head a Cache, which ``_reorder_cache`` is
handed as an EncoderDecoderCache and reorders with ``_pick_beams``)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset

ROOT = Path(__file__).resolve().parent.parent
TOY = ROOT / "fixtures" / "heads" / "toy_rag" / "modeling_toy_rag.py"
SCRIPT = ROOT / "bench" / "toy_rag_beams.py"
ERAS = ("4.52", "4.56", "5", "portable")
RUNTIMES = {
    "4.56": os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"),
    "5": os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"),
}


@functools.cache
def ruleset(era: str):
    return load_ruleset(era)


def migrate(era: str) -> str:
    result = migrate_source(TOY.read_text(), ruleset(era), Options(), path=TOY.name)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    return result


def beams(python: str, module: Path, weights: Path, make: bool = False) -> dict:
    command = [python, str(SCRIPT), str(module), str(weights)] + (["--make"] if make else [])
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    """The original's tokens on 4.51.3, and the weights every run loads."""
    weights = tmp_path_factory.mktemp("toy_rag_weights")
    return weights, beams(sys.executable, TOY, weights, make=True)


@pytest.mark.parametrize("era", ERAS)
def test_the_toy_migrates_with_its_reorder_and_generator_rules(era):
    result = migrate(era)
    assert "CM026" in result.applied and "CM021" not in result.applied
    assert "return reorder_cache_tensors(past_key_values, lambda state: _pick_beams(" in result.migrated
    assert ("CM027" in result.applied) == (era in ("4.52", "portable"))
    assert ({"CM117", "CM118"} <= set(result.applied)) == (era != "4.52")


@pytest.mark.parametrize("era", ("4.52", "portable"))
def test_beam_search_on_4_51_3_gives_the_originals_tokens(era, original, tmp_path):
    weights, expected = original
    assert expected["reorder_saw"] == ["tuple"] and expected["reorder_calls"] > 0
    migrated = tmp_path / TOY.name
    migrated.write_text(migrate(era).migrated)
    found = beams(sys.executable, migrated, weights)
    assert found["tokens"] == expected["tokens"]
    assert found["reorder_saw"] == ["tuple"]  # 4.51.3's BART takes tuples only: the tuple path, as the original's


@pytest.mark.runtimes
@pytest.mark.parametrize(
    "era,runtime", [("4.56", "4.56"), ("5", "5"), ("portable", "4.56"), ("portable", "5")], ids=lambda v: v
)
def test_beam_search_on_later_releases_gives_the_originals_tokens(era, runtime, original, tmp_path):
    python = RUNTIMES[runtime]
    if not Path(python).is_file():
        pytest.skip(f"no interpreter at {python}")
    weights, expected = original
    migrated = tmp_path / TOY.name
    migrated.write_text(migrate(era).migrated)
    found = beams(python, migrated, weights)
    assert not found["missing"] and not found["unexpected"]
    assert found["tokens"] == expected["tokens"]
    assert found["reorder_saw"] == ["EncoderDecoderCache"]  # the Cache path of `_reorder_cache` is what ran
    # the check can fail: a head that leaves the Cache as it is (no reordering) decodes other tokens
    guard = (
        "return reorder_cache_tensors(past_key_values, lambda state: _pick_beams(state, beam_idx.to(state.device)))"
    )
    unordered = tmp_path / "unordered"
    unordered.mkdir()
    (unordered / TOY.name).write_text(migrated.read_text().replace(guard, "return past_key_values"))
    assert (unordered / TOY.name).read_text() != migrated.read_text()
    assert beams(python, unordered / TOY.name, weights)["tokens"] != expected["tokens"]
