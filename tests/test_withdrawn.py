"""A tuple use left where a rule that an ancestor era has, and this era removed, would apply: the CM900 names the
rule, the era that removed it and why (cachemigrate/withdrawn.py), instead of "no rule rewrites this idiom"."""

import shutil
from functools import lru_cache
from pathlib import Path

from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset

REPO = Path(__file__).resolve().parent.parent
FUSED = REPO / "fixtures" / "4.52" / "CM302" / "before.py"
BECAUSE = "this era's runtime cannot hold a fused past; for transformers 4.x, migrate the file for era 4.56"


@lru_cache(maxsize=None)
def _ruleset(era: str):
    return load_ruleset(era)


def test_an_era_knows_the_rules_it_withdrew_and_why():
    withdrawn = {w.rule.id: w for w in _ruleset("5").withdrawn}
    assert withdrawn["CM313"].era == "5" and withdrawn["CM313"].rule.era == "4.52"
    assert "_get_initial_cache_position" in withdrawn["CM313"].because
    assert {w.rule.id for w in _ruleset("4.52").withdrawn} == set()
    assert not {r.id for r in _ruleset("5").rules} & set(withdrawn)
    assert "CM313" in {r.id for r in _ruleset("portable").rules}  # restored: 4.x's generate() calls the override


def _era_5_without_the_fused_rules(tmp_path: Path) -> Path:
    """A copy of the built-in rules whose era 5 also removes the fused layout's concatenation rule."""
    root = tmp_path / "rules"
    shutil.copytree(REPO / "rules", root)
    era = root / "5" / "era.toml"
    text = era.read_text()
    start = text.index("remove = [")
    end = text.index("[removed]")
    era.write_text(
        text[:start] + f'remove = ["CM313", "CM314", "CM302", "CM303"]\nremove_because = "{BECAUSE}"\n\n' + text[end:]
    )
    return root


def test_a_leftover_where_a_withdrawn_rule_applies_names_it(tmp_path):
    ruleset = load_ruleset("5", root=_era_5_without_the_fused_rules(tmp_path))
    result = migrate_source(FUSED.read_text(), ruleset, Options(line_length=119), path=str(FUSED))
    assert result.status == "failed" and result.migrated == FUSED.read_text()
    leftovers = [d for d in result.diagnostics if d.code == "CM900"]
    concat = next(d for d in leftovers if "torch.cat((layer_past, key_value)" in d.message)
    assert "rule CM302 (fused-cat-to-cache-update) of era 4.52 does, but era 5 removed it" in concat.message
    assert "no rule rewrites this idiom" not in concat.message
    assert BECAUSE in concat.message


def test_the_era_that_has_the_rule_migrates_the_same_file():
    for era in ("4.56", "5", "portable"):
        result = migrate_source(FUSED.read_text(), _ruleset(era), Options(line_length=119), path=str(FUSED))
        assert result.status == "migrated", (era, [str(d) for d in result.diagnostics])
