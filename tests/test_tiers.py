"""The static and upstream tiers on transformers 4.51.3's gpt2 and imagegpt (and what they do with
decision_transformer and ctrl), proven with the equivalence probe and direct calls."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset

pytestmark = pytest.mark.corpus

transformers = pytest.importorskip("transformers")
MODELS = Path(transformers.__file__).parent / "models"


@pytest.fixture(scope="module")
def ruleset():
    return load_ruleset("4.52")


def _migrate(tmp_path_factory, ruleset, name: str, tier: str, signature: str = "end"):
    source = MODELS / name / f"modeling_{name}.py"
    folder = tmp_path_factory.mktemp(f"{name}-{tier}-{signature}")
    (folder / "original").mkdir()
    (folder / "migrated").mkdir()
    original = folder / "original" / source.name
    shutil.copy(source, original)
    result = migrate_source(
        original.read_text(), ruleset, Options(tier=tier, line_length=119, signature=signature), path=str(original)
    )
    target = folder / "migrated" / source.name
    target.write_text(result.migrated)
    return original, target, result


@pytest.fixture(scope="module")
def migrated(tmp_path_factory, ruleset):
    cache = {}

    def get(name: str, tier: str, signature: str = "end"):
        key = (name, tier, signature)
        if key not in cache:
            cache[key] = _migrate(tmp_path_factory, ruleset, name, tier, signature)
        return cache[key]

    return get


@pytest.mark.parametrize("tier", ["static", "upstream"])
@pytest.mark.parametrize("name", ["gpt2", "imagegpt"])
def test_static_and_upstream_tiers_pass_every_probe_check(migrated, name, tier):
    from cachemigrate.probe import format_table, run_probe

    original, target, result = migrated(name, tier)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    assert "_supports_static_cache = True" in result.migrated
    results = {r.name: r for r in run_probe(original, target)}
    table = format_table(list(results.values()))
    assert not [r for r in results.values() if r.status in ("fail", "error")], table
    # the static checks and the dynamic-tier checks really ran
    for check in (
        "static_generate",
        "static_compile",
        "tuple_in_tuple_out",
        "dynamic_cache_in_same_object",
        "generate_greedy",
        "generate_beam",
        "jit_trace_tuple",
        "positional_call",
        "gradient_checkpointing",
    ):
        assert results[check].status == "pass", table


def test_decision_transformer_gets_the_static_tier(migrated):
    from cachemigrate.probe import format_table, run_probe

    original, target, result = migrated("decision_transformer", "static")
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    results = {r.name: r for r in run_probe(original, target)}
    assert results["static_compile"].status == "pass", format_table(list(results.values()))
    assert not [r for r in results.values() if r.status in ("fail", "error")], format_table(list(results.values()))


def test_ctrl_static_tier_is_refused_with_the_reason(migrated):
    original, _, result = migrated("ctrl", "static")
    assert result.status == "failed"
    assert result.migrated == original.read_text()
    messages = [d for d in result.diagnostics if d.code == "CM901" and "CM047" in d.message]
    assert messages and "torch.triu" in messages[0].message and "--tier dynamic" in messages[0].message


def _load(path):
    from cachemigrate.probe import load_modeling_module

    return load_modeling_module(path)


def test_upstream_old_keyword_still_works_and_both_raise(migrated):
    import torch

    from cachemigrate.probe import unload_module

    _, target, result = migrated("gpt2", "upstream")
    assert '@deprecate_kwarg("layer_past"' in result.migrated
    assert "layer_past=" not in result.migrated.split("class GPT2Attention")[1].split("class GPT2MLP")[0]
    module = _load(target)
    try:
        from transformers.cache_utils import DynamicCache

        config = module.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=20, n_positions=16)
        config._attn_implementation = "eager"
        torch.manual_seed(0)
        block = module.GPT2Block(config, layer_idx=0).eval()
        hidden = torch.randn(1, 3, 16)
        warm = torch.randn(1, 2, 16)

        def cache():
            fresh = DynamicCache()
            block(warm, past_key_value=fresh, use_cache=True)
            return fresh

        with torch.no_grad():
            new = block(hidden, past_key_value=cache(), use_cache=True)[0]
            old = block(hidden, layer_past=cache(), use_cache=True)[0]
        assert torch.equal(new, old)
        with pytest.raises(ValueError):
            block(hidden, layer_past=cache(), past_key_value=cache(), use_cache=True)
    finally:
        unload_module(module)


def test_signature_upstream_puts_cache_position_after_the_cache(migrated):
    import inspect

    from cachemigrate.probe import unload_module

    _, target, result = migrated("gpt2", "upstream", "upstream")
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    module = _load(target)
    try:
        for cls, cache in (
            (module.GPT2Attention, "past_key_value"),
            (module.GPT2Block, "past_key_value"),
            (module.GPT2Model, "past_key_values"),
        ):
            names = list(inspect.signature(cls.forward).parameters)
            assert names[names.index(cache) + 1] == "cache_position", (cls.__name__, names)
    finally:
        unload_module(module)
    # the default keeps new parameters last, so positional callers are unaffected
    _, default, _ = migrated("gpt2", "upstream")
    module = _load(default)
    try:
        names = list(inspect.signature(module.GPT2Block.forward).parameters)
        assert names[-1] == "cache_position"
    finally:
        unload_module(module)


@pytest.mark.parametrize("tier", ["dynamic", "static", "upstream"])
def test_every_tier_keeps_tracing_with_tuples(migrated, tier):
    """optimum-intel style: torch.jit.trace with a tuple past, and a tuple comes back."""
    import torch

    from cachemigrate.probe import unload_module

    _, target, _ = migrated("gpt2", tier)
    module = _load(target)
    try:
        config = module.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=20, n_positions=16, torchscript=True)
        torch.manual_seed(0)
        model = module.GPT2LMHeadModel(config).eval()
        ids = torch.randint(0, 20, (1, 4))
        with torch.no_grad():
            past = model(ids, use_cache=True)[1]
            step = torch.randint(0, 20, (1, 1))
            traced = torch.jit.trace(model, (step, past), strict=False)
            eager_out = model(step, past_key_values=past, use_cache=True)
            traced_out = traced(step, past)
        assert isinstance(traced_out[1], tuple) and isinstance(traced_out[1][0], tuple)
        assert torch.equal(eager_out[0], traced_out[0])
    finally:
        unload_module(module)


@pytest.mark.parametrize("tier", ["dynamic", "static", "upstream"])
def test_cross_attention_stays_uncached_and_identical(migrated, tier):
    """GPT-2 with add_cross_attention: the cross K/V are recomputed each step as before (never cached, so the
    cache never grows by the encoder length), and logits match the original bit for bit."""
    import torch

    from cachemigrate.probe import unload_module

    original_path, target, _ = migrated("gpt2", tier)
    original, migrated_module = _load(original_path), _load(target)
    try:
        from transformers.cache_utils import DynamicCache

        def build(module):
            config = module.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=20, n_positions=16,
                                       add_cross_attention=True)  # fmt: skip
            config._attn_implementation = "eager"
            torch.manual_seed(0)
            return module.GPT2LMHeadModel(config).eval()

        old, new = build(original), build(migrated_module)
        new.load_state_dict(old.state_dict())
        encoder = torch.randn(1, 5, 16)
        ids = torch.randint(0, 20, (1, 6))
        with torch.no_grad():
            past_old, cache = None, DynamicCache()
            for step in range(ids.shape[1]):
                token = ids[:, step : step + 1]
                out_old = old(token, past_key_values=past_old, encoder_hidden_states=encoder, use_cache=True)
                out_new = new(token, past_key_values=cache, encoder_hidden_states=encoder, use_cache=True)
                past_old = out_old.past_key_values
                assert torch.equal(out_old.logits, out_new.logits)
                assert out_new.past_key_values is cache
                assert cache.get_seq_length() == step + 1  # self-attention tokens only, never the encoder's 5
    finally:
        unload_module(original)
        unload_module(migrated_module)
