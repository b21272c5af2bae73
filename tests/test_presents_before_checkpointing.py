"""A presents accumulator that starts before gradient checkpointing turns `use_cache` off (bloom's and mpt's order):
the fresh cache (CM024) waits for the final `use_cache`, and the accumulator, which CM016 makes read the cache,
moves down below the set-up when nothing it moves over could tell; otherwise the file is refused as before."""

import dataclasses
import textwrap
from pathlib import Path

import libcst as cst
import pytest
from conftest import checkpointed_training, load_class
from test_scenarios import migrate
from test_actions import ERA, make_rule, model

from cachemigrate.facts.analysis import analyze
from cachemigrate.engine import Options, apply_rules

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "4.52" / "presents_before_checkpointing"
OPTIONS = Options(line_length=119)


def _migrate(path: Path):
    return migrate(FIXTURES, path)


def test_the_dynamic_tier_moves_the_accumulator_below_the_fresh_cache():
    """(before.py into after.py exactly, and after.py clean, is tests/test_scenarios.py's.)"""
    result = _migrate(FIXTURES / "before.py")
    assert result.status == "migrated" and {"CM016", "CM024"} <= set(result.applied)
    after = result.migrated
    assert after.index("past_key_values = DynamicCache()") < after.index("presents = past_key_values if use_cache")


@pytest.mark.parametrize("name", ["reads_presents_nomatch.py", "attribute_nomatch.py"])
def test_an_accumulator_that_cannot_move_leaves_the_file_as_it_was(name):
    path = FIXTURES / name
    result = _migrate(path)
    assert result.status == "failed" and result.migrated == path.read_text()
    assert any(d.code == "CM024" and "move that assignment up" in d.message for d in result.diagnostics)


# ------------------------------------------------------------------------------------------------------------------
# the mechanism alone: two inline rules, an accumulator rewrite and a set-up waiting for `use_cache`
# ------------------------------------------------------------------------------------------------------------------


def _renamed(rule):
    """The inline rules all get one id; the mechanism tells rules apart by it."""
    return dataclasses.replace(rule, id="CM991")


SETUP = make_rule(
    "insert_statements",
    {
        "anchor": "after_last_assignment",
        "after_assignments": ["use_cache"],
        "template": "if {cache} is None and use_cache:\n    {cache} = DynamicCache()\n",
    },
    role="base_model",
)
ACCUMULATOR = _renamed(
    make_rule(
        "replace_statements",
        {
            "patterns": ["{p} = () if {u} else None"],
            "replacement": "{p} = {cache} if {u} else None",
        },
        role="base_model",
    )
)


def _run(body: str):
    source = model(textwrap.indent(textwrap.dedent(body), "        "))
    module = cst.parse_module(source)
    new, applied, diagnostics = apply_rules(
        module, analyze(module, ERA.cache_names), [SETUP, ACCUMULATOR], ERA, "inline.py", OPTIONS
    )
    return source, new.code, [str(d) for d in diagnostics]


TAIL = """\
for i, (block, layer_past) in enumerate(zip(self.h, past_key_values)):
    x, present = block(x, layer_past=layer_past)
return x, presents
"""


def test_statements_move_in_their_order_over_code_that_does_not_see_them():
    body = "presents = () if use_cache else None\nkept = () if use_cache else None\nx = self.norm(x)\n"
    source, code, diagnostics = _run(body + "if self.training:\n    use_cache = False\n" + TAIL)
    assert diagnostics == []
    expected = """\
        x = self.norm(x)
        if self.training:
            use_cache = False
        if past_key_values is None and use_cache:
            past_key_values = DynamicCache()
        presents = past_key_values if use_cache else None
        kept = past_key_values if use_cache else None
        for i,"""
    assert expected in code


@pytest.mark.parametrize(
    "first, between",
    [
        ("presents = () if use_cache else None", "log(presents)"),  # read on the way
        ("presents = () if use_cache else None", "presents = ()"),  # rebound on the way
        ("presents = () if use_cache and keep else None", "keep = False"),  # what it reads, rebound on the way
        ("presents = () if use_cache and keep else None", "for keep in (True,):\n    pass"),
        ("presents = () if use_cache and keep else None", "with lock() as keep:\n    pass"),
        ("presents = () if use_cache else None", "past_key_values = trimmed"),  # the cache it would read, rebound
    ],
)
def test_an_accumulator_that_something_on_the_way_could_tell_from_the_original_stays_refused(first, between):
    source, code, diagnostics = _run(first + "\n" + between + "\nif self.training:\n    use_cache = False\n" + TAIL)
    assert any("move that assignment up" in d for d in diagnostics), diagnostics
    assert "DynamicCache()" not in code


def test_an_accumulator_whose_value_could_act_stays_refused():
    """A call, an attribute, an index: evaluated later, it could raise or read something the code on the way
    changed."""
    for value in ("f() if use_cache else None", "() if self.use_cache else None", "() if use_cache[0] else None"):
        rule = _renamed(
            make_rule(
                "replace_statements",
                {"patterns": [f"{{p}} = {value}"], "replacement": "{p} = {cache} if use_cache else None"},
                role="base_model",
            )
        )
        body = f"presents = {value}\nif self.training:\n    use_cache = False\n" + TAIL
        source = model(textwrap.indent(body, "        "))
        module = cst.parse_module(source)
        _, applied, diagnostics = apply_rules(
            module, analyze(module, ERA.cache_names), [SETUP, rule], ERA, "inline.py", OPTIONS
        )
        assert applied.get("CM991") == 1, value  # the rewrite matched: only the move is refused
        assert any("move that assignment up" in str(d) for d in diagnostics), value


# ------------------------------------------------------------------------------------------------------------------
# behaviour: the migrated fixture against the original, on a tiny random model
# ------------------------------------------------------------------------------------------------------------------


def test_the_moved_accumulator_keeps_the_cached_path_and_checkpointing_makes_no_cache(tmp_path):
    torch = pytest.importorskip("torch")
    from transformers import PretrainedConfig

    migrated = tmp_path / "after.py"
    migrated.write_text(_migrate(FIXTURES / "before.py").migrated)
    config = PretrainedConfig(vocab_size=11, hidden_size=8, num_layers=2, dropout=0.0, use_cache=True)
    torch.manual_seed(0)
    old = load_class(FIXTURES / "before.py", "FinchModel", "finch_before")(config)
    new = load_class(migrated, "FinchModel", "finch_after")(config)
    new.load_state_dict(old.state_dict())
    ids = torch.randint(0, 11, (2, 5))
    out, presents = old(ids)
    new_out, new_presents = new(ids)
    assert torch.equal(out, new_out)
    assert isinstance(new_presents, tuple) and len(new_presents) == len(presents) == 2
    assert all(torch.equal(a, b) for pa, pb in zip(presents, new_presents) for a, b in zip(pa, pb))
    step = torch.randint(0, 11, (2, 1))
    assert torch.equal(old(step, presents)[0], new(step, new_presents)[0])
    # training with checkpointing: use_cache goes off before the fresh cache, so the blocks (run again in the
    # backward pass) are handed none, and the gradients are the original's
    grads, caches = checkpointed_training((old, new), ids)
    assert caches[1] is None  # no cache was made, none is handed back
    assert all(torch.equal(a, b) for a, b in zip(*grads))
