"""Gradient checkpointing that turns `use_cache` off inside the loop over the blocks (BLIP-2's and InstructBLIP's
Q-Formers, BROS): where that branch runs each block WITHOUT its past, the cache set-up may come before the loop,
since no block that runs twice is ever handed the cache; where it hands the block its past, the file stays refused."""

from pathlib import Path

import pytest
from conftest import checkpointed_training, load_class
from test_scenarios import migrate

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "4.52" / "checkpointing_in_the_loop"


def _migrate(path: Path):
    return migrate(FIXTURES, path)


def test_the_set_up_goes_before_the_loop_when_the_checkpointed_branch_hands_no_past():
    """(before.py into after.py exactly, and after.py clean, is tests/test_scenarios.py's.)"""
    result = _migrate(FIXTURES / "before.py")
    assert result.status == "migrated" and "CM024" in result.applied
    after = result.migrated
    assert after.index("past_key_values = DynamicCache()") < after.index("for i in range(self.config.num_layers)")


def test_a_checkpointed_branch_that_hands_the_block_its_past_stays_refused():
    path = FIXTURES / "hands_past_nomatch.py"
    result = _migrate(path)
    assert result.status == "failed" and result.migrated == path.read_text()
    assert any(d.code == "CM024" and "inside the loop over the blocks" in d.message for d in result.diagnostics)


def test_the_migrated_encoder_caches_as_before_and_trains_checkpointed_with_the_same_gradients():
    torch = pytest.importorskip("torch")
    from transformers import PretrainedConfig

    config = PretrainedConfig(vocab_size=11, hidden_size=8, num_layers=2, use_cache=True)
    torch.manual_seed(0)
    old = load_class(FIXTURES / "before.py", "WrenModel", "wren_before")(config)
    new = load_class(FIXTURES / "after.py", "WrenModel", "wren_after")(config)
    new.load_state_dict(old.state_dict())
    ids, step = torch.randint(0, 11, (2, 5)), torch.randint(0, 11, (2, 1))
    out, presents = old(ids)
    new_out, new_presents = new(ids)
    assert torch.equal(out, new_out) and isinstance(new_presents, tuple)
    assert all(torch.equal(a, b) for pa, pb in zip(presents, new_presents) for a, b in zip(pa, pb))
    assert torch.equal(old(step, presents)[0], new(step, new_presents)[0])
    grads, returned = checkpointed_training((old, new), ids)
    assert all(torch.equal(a, b) for a, b in zip(*grads))
    assert returned[0] == returned[1] == ()  # caching went off in the loop: nothing cached, an empty tuple back
