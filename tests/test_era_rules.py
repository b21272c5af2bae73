"""Every rule file of the eras that extend 4.52 (rules/4.56, rules/5, rules/portable) against its own before/after
fixtures, run alone with the rule set of its era, as tests/test_rules.py does for era 4.52.

Layout of ``fixtures/<era>/<RULE_ID>/`` (the same scheme as fixtures/4.52): ``before.py`` / ``after.py`` and
``<variant>_before.py`` / ``<variant>_after.py``, where ``after`` is the exact output of that rule alone (with the
vendored helpers it inserts) on ``before``; ``<variant>_nomatch.py``: code the rule must leave byte for byte.
"""

from functools import lru_cache
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.actions import ACTIONS
from cachemigrate.facts.analysis import analyze
from cachemigrate.engine import Options, apply_rules
from cachemigrate.rules.loader import load_ruleset

REPO = Path(__file__).resolve().parent.parent
ERAS = ("4.56", "5", "portable")
OPTIONS = Options(line_length=119)


@lru_cache(maxsize=None)
def ruleset(era: str):
    return load_ruleset(era)


def own_rule_ids(era: str) -> list[str]:
    """The rules an era defines itself (its own rule files), not those it inherits unchanged."""
    return sorted(p.stem for p in (REPO / "rules" / era).glob("CM*.toml"))


def _pairs(rule_dir: Path) -> list[tuple[Path, Path]]:
    return [(b, b.with_name(b.name[: -len("before.py")] + "after.py")) for b in sorted(rule_dir.glob("*before.py"))]


def _fixtures(era: str) -> Path:
    return REPO / "fixtures" / era


OWN = [pytest.param(era, rule_id, id=f"{era}/{rule_id}") for era in ERAS for rule_id in own_rule_ids(era)]
PAIRS = [
    pytest.param(era, b, a, id=f"{era}/{b.parent.name}/{b.name}")
    for era in ERAS
    for d in sorted(_fixtures(era).glob("CM*"))
    for b, a in _pairs(d)
]
NOMATCH = [
    pytest.param(era, p, id=f"{era}/{p.parent.name}/{p.name}")
    for era in ERAS
    for p in sorted(_fixtures(era).glob("CM*/*_nomatch.py"))
]
REFUSED = [
    pytest.param(era, p, id=f"{era}/{p.parent.name}/{p.name}")
    for era in ERAS
    for p in sorted(_fixtures(era).glob("CM*/*refused.py"))
]


def run_rule(era: str, rule_id: str, code: str, path: str = "fixture.py"):
    """Only ``rule_id`` of ``era`` over ``code``: returns (new code, changes per rule, diagnostics)."""
    rules = ruleset(era)
    (rule,) = [r for r in rules.rules if r.id == rule_id]
    module = cst.parse_module(code)
    info = analyze(module, rules.era.cache_names)
    new, applied, diagnostics = apply_rules(module, info, [rule], rules.era, path, OPTIONS)
    return new.code, applied, diagnostics


@pytest.mark.parametrize("era, rule_id", OWN)
def test_every_era_rule_has_a_before_after_pair(era, rule_id):
    (rule,) = [r for r in ruleset(era).rules if r.id == rule_id]
    if ACTIONS[rule.action].REFUSES:
        assert sorted((_fixtures(era) / rule_id).glob("*refused.py")), f"{era}/{rule_id} refuses: it needs refused.py"
        return
    pairs = _pairs(_fixtures(era) / rule_id)
    assert pairs, f"rules/{era}/{rule_id}.toml has no fixtures/{era}/{rule_id}/before.py"
    for before, after in pairs:
        assert after.is_file(), f"{before} has no {after.name}"


@pytest.mark.parametrize("era", ERAS)
def test_era_fixture_directories_name_rules_of_the_era(era):
    stale = sorted(d.name for d in _fixtures(era).glob("CM*") if d.name not in own_rule_ids(era))
    assert not stale, f"fixtures/{era} has fixtures for rules that rules/{era} does not define: {stale}"


@pytest.mark.parametrize("era", ERAS)
def test_era_fixture_files_follow_the_naming_scheme(era):
    for path in _fixtures(era).glob("CM*/*.py"):
        assert path.name.endswith(("before.py", "after.py", "_nomatch.py", "refused.py")), path
        if path.name.endswith("after.py"):
            assert path.with_name(path.name[: -len("after.py")] + "before.py").is_file(), f"{path} has no before"


@pytest.mark.parametrize("era, before, after", PAIRS)
def test_era_rule_alone_turns_before_into_after(era, before, after):
    rule_id = before.parent.name
    migrated, applied, diagnostics = run_rule(era, rule_id, before.read_text(), str(before))
    assert [str(d) for d in diagnostics] == []
    assert applied.get(rule_id, 0) >= 1 and set(applied) == {rule_id}
    assert migrated == after.read_text()


@pytest.mark.parametrize("era, before, after", PAIRS)
def test_era_rule_alone_is_idempotent(era, before, after):
    expected = after.read_text()
    again, applied, _ = run_rule(era, before.parent.name, expected, str(after))
    assert again == expected
    assert applied == {}


@pytest.mark.parametrize("era, path", REFUSED)
def test_era_refusing_rule_alone_reports_and_leaves_the_code_unchanged(era, path):
    code = path.read_text()
    migrated, applied, diagnostics = run_rule(era, path.parent.name, code, str(path))
    assert applied == {} and migrated == code
    assert diagnostics and {d.code for d in diagnostics} == {path.parent.name}
    assert all(d.line > 1 for d in diagnostics)  # at the construct, not at the top of the file


@pytest.mark.parametrize("era, path", NOMATCH)
def test_era_rule_alone_leaves_nomatch_untouched(era, path):
    code = path.read_text()
    migrated, applied, _ = run_rule(era, path.parent.name, code, str(path))
    assert applied == {}
    assert migrated == code
