"""The cross-version probe without false alarms or false confidence: a tensor the file leaves uninitialised, NaN on
both sides, a model that needs an attention mask on its cached steps, ``--config``, a past not in a Cache's layout.

The end-to-end test runs both halves under this interpreter (the cross-version machinery is the same whatever the
runtimes); it uses an edited copy of the bundled tinyfork (written for this repository)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cachemigrate.cli.main import main
from cachemigrate.engine import Options, migrate_source
from cachemigrate.probe.compare import CheckInconclusive, expect_same
from cachemigrate.probe.cross_checks import Replay
from cachemigrate.probe.runtime import Stepper
from cachemigrate.probe.weights import initialise
from cachemigrate.rules.loader import load_ruleset

torch = pytest.importorskip("torch")
REPO = Path(__file__).resolve().parent.parent
TINYFORK = REPO / "fixtures" / "tinyfork" / "tinyfork"


class Holder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)
        self.unset = torch.nn.Parameter(torch.full((4,), float("nan")))  # what torch.empty may hold
        self.garbage = torch.nn.Parameter(torch.full((2, 2), 3e38))
        self.register_buffer("causal", torch.tensor([0.0, float("-inf")]))  # an additive mask, on purpose
        self.register_buffer("lost", torch.full((2,), float("nan")), persistent=False)


def test_uninitialised_tensors_are_set_from_the_seed_and_the_rest_is_kept():
    first, second = Holder(), Holder()
    weight = first.linear.weight.detach().clone()
    assert sorted(initialise(first, 0)) == ["garbage", "lost", "unset"]
    initialise(second, 0)
    for name in ("unset", "garbage", "lost"):
        value = getattr(first, name)
        assert torch.isfinite(value).all() and value.abs().max() < 1, name
        assert torch.equal(value, getattr(second, name)), name  # deterministic: the same in both files
    assert torch.equal(first.linear.weight, weight)  # what the model initialised itself is kept
    assert torch.isinf(first.causal).any()  # a buffer's -inf is meant
    assert not torch.equal(first.unset, Holder().unset.nan_to_num()) and initialise(first, 0) == []


def test_nan_on_both_sides_is_neither_agreement_nor_a_divergence():
    a = torch.tensor([1.0, float("nan")])
    with pytest.raises(CheckInconclusive, match="both models returned NaN at the same 1 of 2"):
        expect_same(a, a.clone(), "logits")
    replay = Replay(None, {"outputs": {}, "inputs": {}, "meta": {}}, rtol=1e-5, atol=1e-5)
    with pytest.raises(CheckInconclusive):
        replay.close(a, a.clone(), "logits")
    assert replay.nan_seen and replay.max_diff == 0.0
    with pytest.raises(Exception, match="NaN at 1 of 2 positions, the original's at 0"):
        replay.close(torch.tensor([1.0, 2.0]), a.clone(), "logits")


def test_the_stepper_feeds_what_the_original_needed():
    full = torch.arange(16).view(2, 8)
    plain, masked, refed = Stepper({}), Stepper({"mask": True}), Stepper({"refeeds": True})
    assert plain.call(full, None)["input_ids"].shape == (2, 5) and "attention_mask" not in plain.call(full, 1)
    assert torch.equal(plain.call(full, 1)["input_ids"], full[:, 6:7])
    assert masked.call(full, 1)["attention_mask"].shape == (2, 7)  # the cached positions and the new one
    assert torch.equal(refed.call(full, 1)["input_ids"], full[:, :7])


def _edited_tinyfork(folder: Path) -> Path:
    """tinyfork with a weight its _init_weights never reaches (NaN, as torch.empty may leave it), and a base model
    that refuses a cached step without an attention mask."""
    package = folder / "tinyfork"
    shutil.copytree(TINYFORK, package)
    modeling = package / "modeling_tinyfork.py"
    text = modeling.read_text()
    mlp = "        self.dropout = nn.Dropout(config.resid_pdrop)\n\n    def forward(self, hidden_states):\n"
    assert mlp in text
    text = text.replace(
        mlp,
        "        self.dropout = nn.Dropout(config.resid_pdrop)\n"
        '        self.shift = nn.Parameter(torch.full((config.n_embd,), float("nan")))\n\n'
        "    def forward(self, hidden_states):\n        hidden_states = hidden_states + self.shift\n",
    )
    past = "            past_length = past_key_values[0][0].size(-2)\n"
    assert past in text
    text = text.replace(
        past,
        past + "            if attention_mask is None:\n"
        '                raise ValueError("a cached step needs the attention mask")\n',
    )
    modeling.write_text(text)
    return modeling


def test_cross_probe_sets_uninitialised_weights_gives_the_mask_and_takes_config(tmp_path):
    original = _edited_tinyfork(tmp_path / "original")
    migrated_folder = tmp_path / "migrated"
    shutil.copytree(original.parent, migrated_folder / "tinyfork")
    migrated = migrated_folder / "tinyfork" / original.name
    result = migrate_source(original.read_text(), load_ruleset("4.52"), Options(line_length=119), path=str(original))
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    migrated.write_text(result.migrated)
    command = ["probe", "--original-python", sys.executable, "--config", "n_layer=3", str(original), str(migrated)]
    done = CliRunner().invoke(main, command)
    assert done.exit_code == 0, done.output
    assert "tuple[3] in -> tuple out" in done.output  # the three layers asked for, on both sides
    assert "diverged" not in done.output.split("probe:")[0] and "nan" not in done.output.lower()
    assert "0 diverged" in done.output and "set-up error" not in done.output


class LayoutToy(torch.nn.Module):
    """A model whose legacy past is BLOOM's: keys [batch*heads, dim, seq], values [batch*heads, seq, dim]; on the
    Cache API it holds 4-D keys and values. Its logits are running sums of what its past holds."""

    def forward(self, input_ids, past_key_values=None, use_cache=True, attention_mask=None):
        from transformers.cache_utils import DynamicCache

        new = input_ids[:, None, :, None].float().expand(-1, 2, -1, 4)  # (batch, heads, seq, dim)
        if isinstance(past_key_values, DynamicCache):
            keys, _ = past_key_values.update(new, new, 0)
            returned = past_key_values
        else:
            keys = new if past_key_values is None else torch.cat([_from_bloom(past_key_values[0][1]), new], dim=2)
            merged = keys.flatten(0, 1)
            returned = ((merged.transpose(1, 2), merged),)
        logits = keys.sum(dim=(1, 3)).cumsum(-1)[:, -input_ids.shape[1] :, None]
        return {"logits": logits, "past_key_values": returned}


def _from_bloom(values):
    return values.view(-1, 2, *values.shape[1:])


def test_the_cross_probe_builds_no_dynamic_cache_from_a_past_not_in_a_cache_layout():
    from cachemigrate.probe.context import PROMPT_LEN, STEPS
    from cachemigrate.probe.cross_checks import cache_in_same_cache

    model = LayoutToy()
    full = torch.arange(1, 1 + 2 * (PROMPT_LEN + STEPS)).view(2, -1)
    out = model(full[:, :PROMPT_LEN])
    given, steps = out["past_key_values"], []
    assert given[0][0].dim() == 3  # BLOOM's layout
    for i in range(STEPS):
        step = model(full[:, PROMPT_LEN + i : PROMPT_LEN + i + 1], given)
        steps.append(step["logits"])
        given = step["past_key_values"]
    reference = {
        "outputs": {"prompt_logits": out["logits"], "prompt_past": out["past_key_values"], "step_logits": steps},
        "inputs": {"full": full},
        "meta": {},
    }
    replay = Replay(None, reference, rtol=1e-5, atol=1e-5)
    replay.model = model
    detail = cache_in_same_cache(replay)  # 'Tensors must have same number of dimensions: got 3 and 4' before
    assert "no DynamicCache built from the original's tuple: it is not (key, value) in a Cache's layout" in detail


@pytest.mark.corpus
@pytest.mark.parametrize("model", ["bart", "t5"])
def test_the_cross_probe_runs_its_cross_attention_checks_on_encoder_decoder_files(tmp_path, model):
    """An encoder-decoder file (migrated for 4.52 where it is not already on the Cache API) against the original,
    across two interpreters: the cross-attention checks run on its decoders (BART: the seq2seq head and the causal
    decoder; T5: the seq2seq head alone, and the decoder-only checks say why they are skipped), and those not run
    across runtimes are listed as skipped with a reason."""
    transformers = pytest.importorskip("transformers")
    from cachemigrate.probe.cross import run_cross_probe
    from cachemigrate.probe.cross_seq2seq import NOT_HERE, RUN

    source = Path(transformers.__file__).parent / "models" / model / f"modeling_{model}.py"
    original, copy = tmp_path / "a" / source.name, tmp_path / "b" / source.name
    for path in (original, copy):
        path.parent.mkdir()
        shutil.copy(source, path)
    result = migrate_source(source.read_text(), load_ruleset("4.52"), Options(line_length=119), path=str(source))
    assert result.status in ("migrated", "clean"), [str(d) for d in result.diagnostics]
    copy.write_text(result.migrated)
    report = run_cross_probe(original, copy, original_python=sys.executable, timeout=600)
    statuses = {r.name: (r.status, r.detail) for r in report.results}
    for name in RUN:
        assert statuses[name][0] == "pass", (name, statuses[name])
        assert "seq2seq" in statuses[name][1], statuses[name]
    for name, reason in NOT_HERE.items():
        assert statuses[name] == ("skip", reason)
    if model == "t5":
        assert statuses["logits_no_cache"] == ("skip", "encoder-decoder model only: driven by the cross_* checks")
    else:
        assert "causal BartForCausalLM" in statuses["cross_cache_written_once"][1]
        assert statuses["logits_no_cache"][0] == "pass"


def test_the_cross_probe_drives_a_bert_style_head_as_a_decoder(tmp_path):
    """A causal head that also takes encoder states (Bert's) keeps no cache unless its config says it is a decoder:
    the reference is recorded with `is_decoder` on, as the same-version probe does, so the tuple and Cache checks
    compare caches, not two Nones."""
    transformers = pytest.importorskip("transformers")
    from cachemigrate.probe.cross import run_cross_probe

    source = Path(transformers.__file__).parent / "models" / "bert" / "modeling_bert.py"
    original, copy = tmp_path / "a" / source.name, tmp_path / "b" / source.name
    for path in (original, copy):
        path.parent.mkdir()
        shutil.copy(source, path)
    result = migrate_source(source.read_text(), load_ruleset("4.52"), Options(line_length=119), path=str(source))
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    copy.write_text(result.migrated)
    report = run_cross_probe(
        original, copy, original_python=sys.executable, package="transformers.models.bert", timeout=600
    )
    statuses = {r.name: (r.status, r.detail) for r in report.results}
    assert statuses["tuple_in_tuple_out"][0] == "pass", statuses["tuple_in_tuple_out"]
    assert statuses["cache_in_same_cache"][0] == "pass", statuses["cache_in_same_cache"]
    assert not [name for name, (status, _) in statuses.items() if status not in ("pass", "skip")], statuses


@pytest.mark.corpus
def test_config_settings_reach_the_cross_attention_checks(tmp_path):
    """``--config`` is set over the config of the decoders the cross_* checks drive (the seq2seq head here), as over
    the decoder-only checks' one: recorded with the setting, the reference says so and its logits change."""
    transformers = pytest.importorskip("transformers")
    from cachemigrate.probe.worker import record

    source = Path(transformers.__file__).parent / "models" / "bart" / "modeling_bart.py"
    entries = {}
    for name, settings in (("plain", {}), ("scaled", {"scale_embedding": True})):
        folder = tmp_path / name
        folder.mkdir()
        record(source, folder, "transformers.models.bart", 0, settings)
        reference = torch.load(folder / "reference.pt", weights_only=False)
        entries[name] = next(e for e in reference["cross"] if e["kind"] == "seq2seq")
    assert entries["scaled"]["config_changes"] == {"scale_embedding": True}
    assert entries["plain"]["config"]["scale_embedding"] is False
    plain, scaled = (entries[name]["steps"][0]["logits"] for name in ("plain", "scaled"))
    assert not torch.allclose(plain, scaled)


def test_the_migrated_side_is_built_from_the_config_class_the_original_was():
    """A head that declares a composite config but is built from one of its sub-configs (as CLVP's decoder head
    is) is rebuilt on the migrated side from that sub-config, by name (built from the declared composite, CLVP's
    generation config took the composite's text end token, 0, and generate() stopped where the original did
    not: the test below)."""
    from transformers import PretrainedConfig, PreTrainedModel

    class PartConfig(PretrainedConfig):
        model_type = "cm_part"

        def __init__(self, width=4, **kwargs):
            self.width = width
            super().__init__(**kwargs)

    class WholeConfig(PretrainedConfig):
        model_type = "cm_whole"
        sub_configs = {"part_config": PartConfig}  # noqa: RUF012 - as transformers declares it

        def __init__(self, part_config=None, **kwargs):
            self.part_config = PartConfig(**(part_config or {}))
            super().__init__(**kwargs)

    class Head(PreTrainedModel):
        config_class = WholeConfig

        def __init__(self, config):
            super().__init__(config)
            self.linear = torch.nn.Linear(config.width, config.width)

    part = PartConfig(width=3, pad_token_id=0)
    reference = {
        "config": part.to_dict(),
        "state_dict": Head(part).state_dict(),
        "meta": {"config_class": "PartConfig", "attn_implementation": "eager", "seed": 0},
    }
    replay = Replay(Head, reference, rtol=1e-5, atol=1e-5)
    replay.build()
    assert type(replay.model.config) is PartConfig and replay.model.config.width == 3
    reference["meta"]["config_class"] = "NotInTheFile"  # no such candidate: the head's own config class
    replay.build()
    assert type(replay.model.config) is WholeConfig


def test_a_same_version_cross_probe_of_a_head_built_from_a_sub_config_does_not_diverge(tmp_path):
    """CLVP's head (declared ``ClvpConfig``, built from ``ClvpDecoderConfig``) migrated for 4.52 and probed with
    both halves on this interpreter: left-padded greedy and beam search agree (they diverged when the migrated side
    was rebuilt from the declared config: an end token the original never had)."""
    transformers = pytest.importorskip("transformers")
    from cachemigrate.probe.cross import run_cross_probe

    source = Path(transformers.__file__).parent / "models" / "clvp" / "modeling_clvp.py"
    migrated = tmp_path / source.name
    result = migrate_source(source.read_text(), load_ruleset("4.52"), Options(line_length=119), path=str(source))
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    migrated.write_text(result.migrated)
    report = run_cross_probe(
        source, migrated, original_python=sys.executable, package="transformers.models.clvp", timeout=600
    )
    statuses = {r.name: (r.status, r.detail) for r in report.results}
    assert statuses["left_padding"][0] == "pass" and statuses["generate_beam"][0] == "pass", statuses
    assert not [name for name, (status, _) in statuses.items() if status not in ("pass", "skip")], statuses


class _Raises:
    """A model whose generate() raises ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def generate(self, *args, **kwargs):
        raise self.error


def test_an_error_the_original_raises_in_another_generate_call_is_no_divergence():
    """The original's beam search raised in the library (4.51.3 reshapes CPM-Ant's wider scores by the vocabulary
    size) before the cached step its greedy search fails at; a newer generate() gets to that step, and the migrated
    model raises there what the original's greedy search raised: both fail, nothing to compare. An error the
    original never raised is still the migrated file's own."""
    from cachemigrate.probe.compare import CheckInconclusive

    at_step = "The size of tensor a (37) must match the size of tensor b (33) at non-singleton dimension 3"
    reference = {
        "outputs": {
            "greedy": {"error": f"RuntimeError: {at_step}"},
            "beam": {"error": "RuntimeError: shape '[2, 297]' is invalid for input of size 6738"},
        },
        "inputs": {},
        "meta": {},
    }
    replay = Replay(None, reference, rtol=1e-5, atol=1e-5)
    prompt = torch.ones(2, 5, dtype=torch.long)
    replay.model = _Raises(RuntimeError(at_step))
    with pytest.raises(CheckInconclusive, match="which the original's own greedy generate\\(\\) raises"):
        replay.tokens("beam", prompt, num_beams=3)
    replay.model = _Raises(RuntimeError("a new fault"))
    with pytest.raises(RuntimeError, match="a new fault"):
        replay.tokens("beam", prompt, num_beams=3)
    with pytest.raises(CheckInconclusive, match="both files raise RuntimeError: The size"):
        replay.model = _Raises(RuntimeError(at_step))
        replay.tokens("greedy", prompt)
