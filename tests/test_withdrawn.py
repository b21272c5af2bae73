"""A tuple use left where a rule that an ancestor era has, and this era removed, would apply: the CM900 names the
rule, the era that removed it and why (cachemigrate/withdrawn.py), instead of "no rule rewrites this idiom"."""

from functools import lru_cache
from pathlib import Path

from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset

FUSED = Path(__file__).resolve().parent.parent / "fixtures" / "4.52" / "CM302" / "before.py"


@lru_cache(maxsize=None)
def _ruleset(era: str):
    return load_ruleset(era)


def test_an_era_knows_the_rules_it_withdrew_and_why():
    withdrawn = {w.rule.id: w for w in _ruleset("5").withdrawn}
    assert withdrawn["CM302"].era == "5" and withdrawn["CM302"].rule.era == "4.52"
    assert "to_legacy_cache" in withdrawn["CM302"].because
    assert {w.rule.id for w in _ruleset("4.52").withdrawn} == set()
    assert not {r.id for r in _ruleset("5").rules} & set(withdrawn)


def test_a_leftover_where_a_withdrawn_rule_applies_names_it():
    result = migrate_source(FUSED.read_text(), _ruleset("5"), Options(line_length=119), path=str(FUSED))
    assert result.status == "failed"
    leftovers = [d for d in result.diagnostics if d.code == "CM900"]
    assert leftovers
    concat = next(d for d in leftovers if "torch.cat((layer_past, key_value)" in d.message)
    assert "rule CM302 (fused-cat-to-cache-update) of era 4.52 does, but era 5 removed it" in concat.message
    assert "no rule rewrites this idiom" not in concat.message
    assert "for transformers 4.x, migrate the file for era 4.56" in concat.message


def test_the_era_that_has_the_rule_migrates_the_same_file():
    result = migrate_source(FUSED.read_text(), _ruleset("4.56"), Options(line_length=119), path=str(FUSED))
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
