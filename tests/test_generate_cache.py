"""CM446 (eras 4.56, 5, portable; cachemigrate/actions/generate_cache.py): a model's own `generate()` makes the
Cache the library's generate() makes. The statements each era inserts are run on the runtimes of that era, on a
tiny library model of each kind: a decoder-only one gets a DynamicCache in `model_kwargs`, under the name the runtime
reads; an encoder-decoder one none (the helper would make an EncoderDecoderCache, which a file's model takes only
where its layers handle one). Era 5's plain call raises on 4.51.3, whose helper also takes the device (which
portable's tests at run time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parent.parent
TF4576 = Path(os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"))
TF5 = Path(os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"))
HERE = Path(sys.executable)  # transformers 4.51.3
RUNS = [("4.56", TF4576), ("5", TF5), ("portable", HERE), ("portable", TF4576), ("portable", TF5)]

SCRIPT = r"""
import inspect, json, sys
import torch
from transformers import BartConfig, BartForConditionalGeneration, GenerationConfig, LlamaConfig, LlamaForCausalLM
from transformers.cache_utils import Cache

template = sys.stdin.read()
found = {}
for name, model in (
    ("decoder-only", LlamaForCausalLM(LlamaConfig(num_hidden_layers=1, hidden_size=8, intermediate_size=8,
        num_attention_heads=2, num_key_value_heads=2, vocab_size=11, max_position_embeddings=32))),
    ("encoder-decoder", BartForConditionalGeneration(BartConfig(
        encoder_layers=1, decoder_layers=1, d_model=8, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=8, decoder_ffn_dim=8, vocab_size=11, max_position_embeddings=32))),
):
    scope = {"self": model, "inspect": inspect, "generation_config": GenerationConfig(max_length=10),
             "model_kwargs": {"use_cache": True}, "batch_size": 2}
    try:
        exec(template, scope)
    except Exception as exc:
        found[name] = f"{type(exc).__name__}: {exc}"
        continue
    caches = {k: type(v).__name__ for k, v in scope["model_kwargs"].items() if isinstance(v, Cache)}
    found[name] = caches
print(json.dumps(found))
"""


def _template(era: str) -> str:
    return tomllib.loads((REPO / "rules" / era / "CM446.toml").read_text())["params"]["template"]


def _run(python: Path, template: str) -> dict:
    if not python.is_file():
        pytest.skip(f"{python} is missing")
    done = subprocess.run(
        [str(python), "-c", SCRIPT], input=template, capture_output=True, text=True, check=False, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.runtimes
@pytest.mark.parametrize("era, python", RUNS, ids=[f"{e}-{p.parent.parent.name}" for e, p in RUNS])
def test_the_inserted_statements_leave_a_cache_on_the_eras_runtimes(era, python):
    found = _run(python, _template(era))
    # one cache, under the name the runtime's generate() reads it from (`past_key_values`, 5.x: `cache`)
    assert list(found["decoder-only"].values()) == ["DynamicCache"], found
    assert found["encoder-decoder"] == {}, found


@pytest.mark.runtimes
def test_era_5s_plain_call_does_not_fit_4_51_s_helper():
    """Why portable tests the helper's parameters: 4.51.3's takes the device as well."""
    found = _run(HERE, _template("5"))
    assert found["decoder-only"].startswith("TypeError") and "device" in found["decoder-only"], found
