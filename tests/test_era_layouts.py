"""A cache kept in another layout than a Cache's, with the base model converting it in and out (Falcon's
`_convert_to_rw_cache` / `_convert_cache_to_standard_format`), migrated for era 5 and the portable target: the
attention moves its own tensors to the Cache's layout and back (`unflatten` / `flatten`, which every runtime has),
both model-level conversions go, and nothing is written with the converters 5.x removed."""

import importlib.util
import re
from pathlib import Path

import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset

KESTREL = Path(__file__).resolve().parent.parent / "fixtures" / "4.52" / "CM306" / "before.py"
LAYOUT_RULES = {"CM010", "CM300", "CM306", "CM307", "CM018"}


def migrate(era: str) -> str:
    result = migrate_source(KESTREL.read_text(), load_ruleset(era), Options(line_length=119), path=str(KESTREL))
    assert [str(d) for d in result.diagnostics] == []
    assert result.status == "migrated" and LAYOUT_RULES <= set(result.applied), result.applied
    return result.migrated


def calls(code: str, name: str) -> list[str]:
    """The lines of ``code`` that call ``.name(``."""
    return [line.strip() for line in code.splitlines() if re.search(rf"\.{name}\(", line)]


@pytest.mark.parametrize("era", ["5", "portable"])
def test_a_falcon_like_model_migrates_for_eras_without_the_converters_and_a_second_run_is_clean(era):
    migrated = migrate(era)
    assert "_convert_to_rw_cache(past_key_values)" not in migrated
    assert "_convert_cache_to_standard_format(presents" not in migrated
    assert calls(migrated, "from_legacy_cache") == []
    assert "DynamicCache(past_key_values)" in migrated
    assert ".unflatten(0, (-1, self.num_heads))" in migrated and ".flatten(0, 1)" in migrated
    if era == "5":
        assert calls(migrated, "to_legacy_cache") == []
    else:  # portable: only where the release has it, else from the cache's layers
        assert 'if hasattr(presents, "to_legacy_cache"):' in migrated
    again = migrate_source(migrated, load_ruleset(era), Options(line_length=119), path="migrated.py")
    assert again.status == "clean" and again.diagnostics == []


def _load(code: str, tmp_path: Path, name: str):
    path = tmp_path / f"{name}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(f"era_layouts_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_portable_falcon_like_model_computes_what_the_original_did_on_this_runtime(tmp_path):
    """Bit for bit on the installed transformers (4.51.3): a prompt without a past, then a step with the original's
    tuple past (a tuple of the boundary layout `[batch, heads, seq, head_dim]` comes back), then with a DynamicCache
    (the same object comes back, grown)."""
    torch = pytest.importorskip("torch")
    from transformers import PretrainedConfig
    from transformers.cache_utils import DynamicCache

    old = _load(KESTREL.read_text(), tmp_path, "original")
    new = _load(migrate("portable"), tmp_path, "migrated")
    config = PretrainedConfig(vocab_size=50, hidden_size=32, num_attention_heads=4, num_hidden_layers=2)
    torch.manual_seed(0)
    original, migrated = old.KestrelModel(config).eval(), new.KestrelModel(config).eval()
    migrated.load_state_dict(original.state_dict())
    prompt, step = torch.randint(0, 50, (2, 5)), torch.randint(0, 50, (2, 1))
    with torch.no_grad():
        hidden, past = original(prompt, use_cache=True)
        next_hidden, next_past = original(step, past_key_values=past, use_cache=True)
        got_hidden, got_past = migrated(prompt, use_cache=True)
        got_next, got_next_past = migrated(step, past_key_values=got_past, use_cache=True)
        cache = DynamicCache()
        cached = [migrated(prompt, past_key_values=cache, use_cache=True), migrated(step, cache, use_cache=True)]
    assert torch.equal(hidden, got_hidden) and torch.equal(next_hidden, got_next)
    for expected, got in ((past, got_past), (next_past, got_next_past)):
        assert isinstance(got, tuple) and len(got) == len(expected) == 2
        for (key, value), (got_key, got_value) in zip(expected, got):
            assert key.shape == (2, 4, key.shape[2], 8) and torch.equal(key, got_key) and torch.equal(value, got_value)
    assert all(out[1] is cache for out in cached) and cache.get_seq_length() == 6
    assert torch.equal(cached[0][0], hidden) and torch.equal(cached[1][0], next_hidden)
