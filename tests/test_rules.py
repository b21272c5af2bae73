"""Every built-in rule of era 4.52 against its own before/after fixtures, run alone; and the full dynamic tier
on a complete small legacy model.

Layout of ``fixtures/4.52/<RULE_ID>/``:

* ``before.py`` / ``after.py`` and ``<variant>_before.py`` / ``<variant>_after.py``: ``after`` is the exact
  output of running only that rule on ``before``;
* ``<variant>_nomatch.py``: code the rule must not touch (byte for byte, zero changes);
* ``refused.py`` / ``<variant>_refused.py``: code a refusing rule (an action that only reports, ``REFUSES``)
  reports, at a line of its own, and leaves unchanged. Such a rule has these instead of a before/after pair.

``fixtures/4.52/full/before.py`` / ``after.py``: the whole dynamic tier through ``migrate_source``.
"""

from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.actions import ACTIONS
from cachemigrate.facts.analysis import analyze
from cachemigrate.engine import Options, apply_rules, migrate_source
from cachemigrate.rules.loader import RuleError, load_ruleset

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "4.52"
RULESET = load_ruleset("4.52")
RULES = {rule.id: rule for rule in RULESET.rules}
OPTIONS = Options(line_length=119)


def _pairs(rule_dir: Path) -> list[tuple[Path, Path]]:
    return [(b, b.with_name(b.name[: -len("before.py")] + "after.py")) for b in sorted(rule_dir.glob("*before.py"))]


PAIRS = [
    pytest.param(b, a, id=f"{b.parent.name}/{b.name}") for d in sorted(FIXTURES.glob("CM*")) for b, a in _pairs(d)
]
NOMATCH = [pytest.param(p, id=f"{p.parent.name}/{p.name}") for p in sorted(FIXTURES.glob("CM*/*_nomatch.py"))]
REFUSED = [pytest.param(p, id=f"{p.parent.name}/{p.name}") for p in sorted(FIXTURES.glob("CM*/*refused.py"))]


def run_rule(rule_id: str, code: str, path: str = "fixture.py"):
    """Only ``rule_id`` over ``code``: returns (new code, changes per rule, diagnostics)."""
    module = cst.parse_module(code)
    info = analyze(module, RULESET.era.cache_names)
    new, applied, diagnostics = apply_rules(module, info, [RULES[rule_id]], RULESET.era, path, OPTIONS)
    return new.code, applied, diagnostics


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_every_rule_has_a_before_after_pair(rule_id):
    if ACTIONS[RULES[rule_id].action].REFUSES:
        assert sorted((FIXTURES / rule_id).glob("*refused.py")), f"{rule_id} refuses: it needs a refused.py fixture"
        return
    pairs = _pairs(FIXTURES / rule_id)
    assert pairs, f"rules/4.52/{rule_id}.toml has no fixtures/4.52/{rule_id}/before.py"
    for before, after in pairs:
        assert after.is_file(), f"{before} has no {after.name}"


def test_fixture_directories_name_existing_rules():
    stale = sorted(d.name for d in FIXTURES.glob("CM*") if d.name not in RULES)
    assert not stale, f"fixtures for rules that do not exist: {stale}"


def test_fixture_files_follow_the_naming_scheme():
    for path in FIXTURES.glob("CM*/*.py"):
        assert path.name.endswith(("before.py", "after.py", "_nomatch.py", "refused.py")), path
        if path.name.endswith("after.py"):
            assert path.with_name(path.name[: -len("after.py")] + "before.py").is_file(), f"{path} has no before"


@pytest.mark.parametrize("before, after", PAIRS)
def test_rule_alone_turns_before_into_after(before, after):
    rule_id = before.parent.name
    code = before.read_text()
    migrated, applied, diagnostics = run_rule(rule_id, code, str(before))
    assert [str(d) for d in diagnostics] == []
    assert applied.get(rule_id, 0) >= 1 and set(applied) == {rule_id}
    assert migrated == after.read_text()


@pytest.mark.parametrize("before, after", PAIRS)
def test_rule_alone_is_idempotent(before, after):
    """Running the rule again on its own output changes nothing."""
    expected = after.read_text()
    again, applied, diagnostics = run_rule(before.parent.name, expected, str(after))
    assert again == expected
    assert applied == {}


@pytest.mark.parametrize("path", NOMATCH)
def test_rule_alone_leaves_nomatch_untouched(path):
    code = path.read_text()
    migrated, applied, _ = run_rule(path.parent.name, code, str(path))
    assert applied == {}
    assert migrated == code


@pytest.mark.parametrize("path", REFUSED)
def test_refusing_rule_alone_reports_and_leaves_the_code_unchanged(path):
    code = path.read_text()
    migrated, applied, diagnostics = run_rule(path.parent.name, code, str(path))
    assert applied == {} and migrated == code
    assert diagnostics and {d.code for d in diagnostics} == {path.parent.name}
    assert all(d.line > 1 for d in diagnostics)  # at the construct, not at the top of the file


# ------------------------------------------------------------------------------------------------------------------
# The whole dynamic tier on a complete model
# ------------------------------------------------------------------------------------------------------------------

FULL = FIXTURES / "full"


def test_the_full_fixture_exercises_every_role_of_the_dynamic_tier():
    """(before.py into after.py, and after.py clean, is tests/test_scenarios.py's.)"""
    result = migrate_source((FULL / "before.py").read_text(), RULESET, OPTIONS, path="before.py")
    # the fixture exercises the attention, block, model, pretrained and head rules and the generation helpers
    assert {"CM001", "CM002", "CM010", "CM011", "CM012", "CM014", "CM016", "CM017", "CM018", "CM020", "CM021",
            "CM030", "CM031"} <= set(result.applied)  # fmt: skip


FULL_STATIC = FIXTURES / "full_static"
STATIC = Options(tier="static", line_length=119)


def test_the_full_static_fixture_exercises_every_static_rule():
    result = migrate_source((FULL_STATIC / "before.py").read_text(), RULESET, STATIC, path="before.py")
    # every static rule of the era had something to do in this fixture
    assert {f"CM0{n}" for n in range(40, 53)} <= set(result.applied)
    assert "CM002" not in result.applied and "CM041" in result.applied  # CM041 replaces CM002


def test_full_before_is_legacy_and_after_is_not():
    """The analysis sees tuple-cache code in before.py and none left in after.py."""
    before = analyze(cst.parse_module((FULL / "before.py").read_text()), RULESET.era.cache_names)
    after = analyze(cst.parse_module((FULL / "after.py").read_text()), RULESET.era.cache_names)
    assert before.legacy_uses()
    assert after.legacy_uses() == []
    roles = {role: names for role, names in before.roles.items()}
    assert roles == {
        "attention": ["PebbleSelfAttention"],
        "block": ["PebbleLayer"],
        "base_model": ["PebbleModel"],
        "pretrained": ["PebblePreTrainedModel"],
        "head": ["PebbleForCausalLM"],
        "reader": [],
        "consumer": [],  # functions outside a model that edit a past: none in a model file
        "patch": [],  # functions patched onto a library attention: none here
    }


# ------------------------------------------------------------------------------------------------------------------
# An idiom no rule knows: the file fails as a whole, unchanged, with a located diagnostic per idiom
# ------------------------------------------------------------------------------------------------------------------

WEIRD = FIXTURES.parent / "unknown_idiom" / "modeling_weird.py"


def position_of(text: str, line_text: str, name: str) -> tuple[int, int]:
    """1-based line and column of ``name`` on the one line of ``text`` that contains ``line_text``."""
    lines = [number for number, line in enumerate(text.splitlines(), 1) if line_text in line]
    assert len(lines) == 1, f"{line_text!r} is on lines {lines}"
    line = text.splitlines()[lines[0] - 1]
    return lines[0], line.index(name, line.index(line_text)) + 1


def test_unknown_idiom_fails_unchanged_with_located_diagnostics():
    code = WEIRD.read_bytes().decode("utf-8")
    result = migrate_source(code, RULESET, OPTIONS, path="weird.py")
    assert result.status == "failed"
    assert result.migrated == code and not result.changed
    unknown = [str(d) for d in result.diagnostics if d.code == "CM900"]
    # the attention's transposed keys: the unpacking of the cache is the tuple use left behind
    line, column = position_of(code, "past_key, past_value = layer_past", "layer_past")
    assert any(d.startswith(f"weird.py:{line}:{column}: CM900 `layer_past` is used as a tuple cache") for d in unknown)
    # the model's past length off the last layer (`size()[-2]` is read as `.shape[-2]`; the layer is unknown)
    line, column = position_of(code, "past_length = past_key_values[-1][0].size()[-2]", "past_key_values")
    assert any(d.startswith(f"weird.py:{line}:{column}: CM900 `past_key_values`") for d in unknown)
    assert len(unknown) == 2
    # the cat rule that found nothing to rewrite says so, at the concatenation whose layout is not known
    line, column = position_of(code, "key = torch.cat((key, past_key), dim=-2)", "torch.cat")
    assert any(str(d).startswith(f"weird.py:{line}:{column}: CM901 CM002") for d in result.diagnostics)


def test_a_user_rule_teaches_one_of_the_unknown_idioms():
    ruleset = load_ruleset("4.52", (FIXTURES.parent / "user_rules",))
    code = WEIRD.read_text()
    result = migrate_source(code, ruleset, OPTIONS, path="weird.py")
    assert result.status == "failed" and result.migrated == code  # the attention idiom is still unknown
    unknown = [d for d in result.diagnostics if d.code == "CM900"]
    assert [d.message.split()[0] for d in unknown] == ["`layer_past`"]
    assert result.applied.get("CM500") == 1


# ------------------------------------------------------------------------------------------------------------------
# Rule files: malformed ones are errors naming the file, the line, the key and what was expected
# ------------------------------------------------------------------------------------------------------------------

BAD_RULES = FIXTURES.parent / "bad_rules"
BAD_CASES = {
    # case: (key named in the message, whether the line of the key can be given)
    "missing_action": ("action", False),
    "unknown_action": ("action", True),
    "unknown_key": ("requried", True),
    "patterns_type": ("params.patterns", True),
    "pattern_items_type": ("params.patterns", True),
    "bad_template": ("params.pattern", True),
    "unbound_hole": ("params.replacement", True),
    "unknown_fact": ("when.attention_kind", True),
    "era_mismatch": ("era", True),
    "bad_anchor": ("params.anchor", True),
}


def test_every_bad_rules_case_is_tested():
    assert sorted(p.name for p in BAD_RULES.iterdir() if p.is_dir()) == sorted(BAD_CASES)


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_rule_file_is_a_rule_error_naming_file_line_and_key(case):
    key, has_line = BAD_CASES[case]
    (path,) = (BAD_RULES / case / "4.52").glob("*.toml")
    with pytest.raises(RuleError) as error:
        load_ruleset("4.52", (BAD_RULES / case,))
    message = str(error.value)
    assert message.startswith(str(path))
    assert f"`{key}`" in message and "expected" in message
    if has_line:
        last = key.split(".")[-1]
        line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if text.startswith(f"{last} ="))
        assert message.startswith(f"{path}:{line}: ")


def test_user_rules_are_added_and_override_builtins_by_id(tmp_path):
    user = FIXTURES.parent / "user_rules"
    ruleset = load_ruleset("4.52", (user,))
    assert {r.id for r in ruleset.rules} == set(RULES) | {"CM500"}
    assert next(r for r in ruleset.rules if r.id == "CM500").path == user / "4.52" / "CM500.toml"
    # a user rule with a built-in id replaces the built-in one
    override = (FIXTURES.parent.parent / "rules" / "4.52" / "CM031.toml").read_text()
    override = override.replace('name = "heads-accept-cache-position"', 'name = "my-heads-rule"')
    (tmp_path / "CM031.toml").write_text(override)
    ruleset = load_ruleset("4.52", (tmp_path,))
    [cm031] = [r for r in ruleset.rules if r.id == "CM031"]
    assert cm031.name == "my-heads-rule" and cm031.path == tmp_path / "CM031.toml"
    assert len(ruleset.rules) == len(RULES)


def test_two_rules_with_one_id_in_one_directory_are_an_error(tmp_path):
    rule = (FIXTURES.parent / "user_rules" / "4.52" / "CM500.toml").read_text()
    (tmp_path / "CM500.toml").write_text(rule)
    (tmp_path / "CM500_copy.toml").write_text(rule)
    with pytest.raises(RuleError, match="key `id`: CM500 is also used by"):
        load_ruleset("4.52", (tmp_path,))


def test_a_missing_rules_directory_and_an_unknown_era_are_errors(tmp_path):
    with pytest.raises(RuleError, match="rules directory does not exist"):
        load_ruleset("4.52", (tmp_path / "nowhere",))
    with pytest.raises(RuleError, match="unknown era '3.0'.*known eras: .*4.52"):
        load_ruleset("3.0")


def test_an_unrecognised_cache_layout_fails_instead_of_skipping_the_tuple_return():
    """CM018 and CM019 (give a tuple back) depend on the legacy layout; when no statement shows it, the file must
    not be migrated without them."""
    code = (FULL / "before.py").read_text()
    edited = code.replace(
        "        if use_cache:\n            present = (k, v)\n        else:\n            present = None\n",
        "        present = self.pack(k, v) if use_cache else None\n",
    )
    assert edited != code
    result = migrate_source(edited, RULESET, OPTIONS, path="edited.py")
    assert result.status == "failed" and result.migrated == edited
    messages = [str(d) for d in result.diagnostics]
    line = (
        edited.splitlines().index(
            "    def forward(self, input_ids, past_key_values=None, attention_mask=None, use_cache=None):"
        )
        + 1
    )
    about_layout = [m for m in messages if "legacy layout" in m]
    assert about_layout == [
        m for m in messages if m.startswith(f"edited.py:{line}:5: CM901 CM018 (return-legacy-cache) cannot tell")
    ]
    assert len(about_layout) == 1  # reported once, not once per layout rule
    assert "era.toml" not in about_layout[0] and "fact" not in about_layout[0]  # no internal jargon


@pytest.mark.parametrize(
    "present, rule_id",
    [("(k, v) if use_cache else None", "CM018"), ("torch.stack((k, v)) if use_cache else None", "CM019")],
)
def test_the_cache_layout_is_read_from_a_conditional_present(present, rule_id):
    code = (FULL / "before.py").read_text()
    edited = code.replace(
        "        if use_cache:\n            present = (k, v)\n        else:\n            present = None\n",
        f"        present = {present}\n",
    )
    result = migrate_source(edited, RULESET, OPTIONS, path="edited.py")
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    assert rule_id in result.applied and ({"CM018", "CM019"} - {rule_id}).isdisjoint(result.applied)


def test_a_rule_whose_template_needs_an_absent_fact_is_reported_not_an_internal_error():
    """CM016 and CM018 fill `{presents}` in; a base model that never starts its presents tuple in a known way is left
    unchanged with a CM901 saying so (this was an internal TemplateError)."""
    code = (FULL / "before.py").read_text()
    edited = code.replace("next_cache = () if use_cache else None", "next_cache = self.empty_presents(use_cache)")
    assert edited != code
    result = migrate_source(edited, RULESET, OPTIONS, path="edited.py")
    assert result.status == "failed" and result.migrated == edited
    messages = [str(d) for d in result.diagnostics]
    assert any("CM901 CM016" in m and "tuple of presents" in m for m in messages), messages
    assert len([m for m in messages if "tuple of presents" in m]) == 1  # once, not once per rule that needs it
    assert not any("internal error" in m for m in messages)


@pytest.mark.parametrize(
    "condition, migrates",
    [
        ("self.config.use_cache and use_cache is not False", True),
        ("use_cache is True", True),
        ("output_hidden_states", False),  # the same shape, but not the presents: nothing reads use_cache
    ],
)
def test_the_presents_accumulator_is_any_empty_tuple_whose_condition_reads_use_cache(condition, migrates):
    code = (FULL / "before.py").read_text()
    edited = code.replace("next_cache = () if use_cache else None", f"next_cache = () if {condition} else None")
    result = migrate_source(edited, RULESET, OPTIONS, path="edited.py")
    assert (result.status == "migrated") is migrates, [str(d) for d in result.diagnostics]


def test_the_presents_of_an_encoder_decoder_stack_are_not_its_hidden_states():
    """A Bart-style stack starts `all_hidden_states` the same way as its presents, and first: the presents fact
    is the tuple whose condition reads use_cache (CM211 returns it, and leaves the hidden states alone)."""
    code = (FIXTURES / "CM211" / "before.py").read_text()
    start = "        next_decoder_cache = () if use_cache else None\n"
    edited = code.replace(start, "        all_hidden_states = () if self.training else None\n" + start)
    assert edited != code
    migrated, applied, diagnostics = run_rule("CM211", edited)
    assert applied == {"CM211": 1} and diagnostics == []
    assert "next_decoder_cache = next_decoder_cache.self_attention_cache" in migrated
    assert "all_hidden_states." not in migrated
