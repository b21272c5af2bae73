"""The first generation step, told by the absence of a past in ``prepare_inputs_for_generation``.

``generate()`` hands a migrated model an EMPTY Cache on its first step where a tuple model got None. A hook that
tests ``past_key_values is not None`` (and cuts the prompt to its last token, without reading the past length)
must see that empty Cache as "no past" (CM103/CM104), or the migration must be refused (first_step.py): kosmos2
of transformers 4.35.2 was once migrated with the test left as it was, and its generate() diverged.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from cachemigrate import diagnostics as codes
from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset
from cachemigrate.rules.schema import RuleSet

torch = pytest.importorskip("torch")
cache_utils = pytest.importorskip("transformers.cache_utils")

RULESET = load_ruleset("4.52")
OPTIONS = Options(line_length=119)
FULL = Path(__file__).resolve().parent.parent / "fixtures" / "4.52" / "full" / "before.py"
HOOK = """    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, **kwargs):
        if past_key_values is not None:
            past_length = past_key_values[0][0].size(-2)
            input_ids = input_ids[:, past_length:]
        return {"input_ids": input_ids, "past_key_values": past_key_values, "use_cache": kwargs.get("use_cache")}
"""
# hooks that tell the first step by the absence of a past only (none reads the past length)
HOOKS = {
    "is_not_none": """    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, **kwargs):
        if past_key_values is not None:
            input_ids = input_ids[:, -1:]
        return {"input_ids": input_ids, "past_key_values": past_key_values}
""",
    "truth_test": """    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, **kwargs):
        if past_key_values:
            input_ids = input_ids[:, -1:]
        return {"input_ids": input_ids, "past_key_values": past_key_values}
""",
    "is_none": """    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, inputs_embeds=None, **kwargs):
        if inputs_embeds is not None and past_key_values is None:
            return {"inputs_embeds": inputs_embeds, "past_key_values": past_key_values}
        return {"input_ids": input_ids[:, -1:], "past_key_values": past_key_values}
""",
}


def _source(hook: str) -> str:
    source = FULL.read_text()
    assert HOOK in source, "the full fixture's prepare_inputs_for_generation changed: update HOOK"
    return source.replace(HOOK, hook)


def _hook(code: str):
    """``PebbleForCausalLM.prepare_inputs_for_generation`` of ``code`` (the toy's hooks never read ``self``)."""
    module = types.ModuleType("first_step_toy")
    exec(compile(code, "first_step_toy.py", "exec"), module.__dict__)
    return module.PebbleForCausalLM.prepare_inputs_for_generation


def _same(left: dict, right: dict) -> bool:
    if left.keys() != right.keys():
        return False
    for key in left:
        a, b = left[key], right[key]
        if isinstance(a, torch.Tensor) and not (isinstance(b, torch.Tensor) and torch.equal(a, b)):
            return False
    return True


@pytest.mark.parametrize("spelling", sorted(HOOKS))
def test_an_empty_cache_on_the_first_step_reads_as_no_past(spelling):
    result = migrate_source(_source(HOOKS[spelling]), RULESET, OPTIONS, path="toy.py")
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    original, migrated = _hook(_source(HOOKS[spelling])), _hook(result.migrated)
    input_ids = torch.arange(10).view(2, 5)
    embeds = torch.ones(2, 5, 4)
    layer = (torch.ones(2, 1, 4, 3), torch.ones(2, 1, 4, 3))
    # first step: None before, an empty DynamicCache now
    first = original(None, input_ids, past_key_values=None, inputs_embeds=embeds)
    empty = migrated(None, input_ids, past_key_values=cache_utils.DynamicCache(), inputs_embeds=embeds)
    assert _same(first, empty), (first, empty)
    # a later step: a tuple past before, the same past in a DynamicCache now; and a tuple as before
    later = original(None, input_ids, past_key_values=(layer,), inputs_embeds=embeds)
    cache = cache_utils.DynamicCache.from_legacy_cache((layer,))
    filled = migrated(None, input_ids, past_key_values=cache, inputs_embeds=embeds)
    assert _same(later, filled), (later, filled)
    assert _same(later, migrated(None, input_ids, past_key_values=(layer,), inputs_embeds=embeds))


@pytest.mark.parametrize("spelling", sorted(HOOKS))
def test_without_the_rewrite_the_file_is_refused_not_migrated(spelling):
    source = _source(HOOKS[spelling])
    ruleset = RuleSet(RULESET.era, tuple(r for r in RULESET.rules if r.id not in ("CM103", "CM104")))
    result = migrate_source(source, ruleset, OPTIONS, path="toy.py")
    assert result.status == "failed"
    [diagnostic] = [d for d in result.diagnostics if "first generation step" in d.message]
    assert diagnostic.code == codes.UNKNOWN_IDIOM
    hook = source.index("def prepare_inputs_for_generation")
    tested = source[:hook].count("\n") + 2  # the hook's first statement is its test
    assert diagnostic.line == tested
    assert "PebbleForCausalLM.prepare_inputs_for_generation" in diagnostic.message


def test_a_hook_that_reads_the_past_length_keeps_working_with_the_rewrite():
    """The full fixture's hook cuts by the past length: an empty Cache cut nothing before, and skips the cut now."""
    result = migrate_source(FULL.read_text(), RULESET, OPTIONS, path="toy.py")
    assert result.status == "migrated"
    original, migrated = _hook(FULL.read_text()), _hook(result.migrated)
    input_ids = torch.arange(10).view(2, 5)
    assert _same(original(None, input_ids), migrated(None, input_ids, past_key_values=cache_utils.DynamicCache()))


def test_a_hook_defined_at_the_top_of_the_file_is_audited_too():
    """Idefics (4.35.2) defines `prepare_inputs_for_generation` as a module function that its head calls."""
    hook = HOOKS["is_not_none"].replace(
        "    def prepare_inputs_for_generation(self, ", "def prepare_inputs_for_generation("
    )
    hook = "\n".join(line[4:] if line.startswith("    ") else line for line in hook.splitlines()) + "\n"
    source = FULL.read_text() + "\n\n" + hook
    ruleset = RuleSet(RULESET.era, tuple(r for r in RULESET.rules if r.id not in ("CM103", "CM104")))
    result = migrate_source(source, ruleset, OPTIONS, path="toy.py")
    assert result.status == "failed"
    assert any("prepare_inputs_for_generation tells the first" in d.message for d in result.diagnostics)
    assert migrate_source(source, RULESET, OPTIONS, path="toy.py").status == "migrated"


def test_a_presence_test_a_rule_writes_is_not_taken_for_one_the_user_left():
    """Era 5 adopts the cache 5.24's generate() hands as `cache=` with `if cache is not None and past is None:`; the
    user's own test is rewritten (CM103) and the file migrates."""
    era5 = load_ruleset("5")
    result = migrate_source(_source(HOOKS["is_not_none"]), era5, OPTIONS, path="toy.py")
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    assert "if cache is not None and past_key_values is None:" in result.migrated
    assert {"CM103", "CM408"} <= set(result.applied)
    without = RuleSet(era5.era, tuple(r for r in era5.rules if r.id not in ("CM103", "CM104")))
    assert migrate_source(_source(HOOKS["is_not_none"]), without, OPTIONS, path="toy.py").status == "failed"
