"""Era gaps (cachemigrate.gaps): a legacy idiom that an older era's rule rewrites, left in a file because the era
asked for removes that rule, is a CM900 naming the rule, the era that removes it and what its runtime lacks, never
an invitation to "add a rule"."""

from pathlib import Path

import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(scope="module")
def era5():
    return load_ruleset("5")


@pytest.mark.parametrize("fixture", ["CM302", "CM200"])  # a fused K/V layout, an encoder-decoder
def test_a_use_an_older_era_migrates_names_the_removed_rule_and_the_missing_api(era5, fixture):
    path = FIXTURES / "4.52" / fixture / "before.py"
    removed = {rule.id: by for by, rule in era5.dropped}
    assert fixture in removed  # the premise: era 5 lacks the rule that migrates this fixture in 4.52
    result = migrate_source(path.read_text(), era5, Options(line_length=119), path=str(path))
    leftovers = [d for d in result.diagnostics if d.code == "CM900"]
    assert result.status == "failed" and leftovers, [str(d) for d in result.diagnostics]
    for diagnostic in leftovers:
        message = diagnostic.message
        assert "add a rule" not in message and "era 5 has no rule for this idiom" in message, message
        named = [rule_id for rule_id in removed if f"{rule_id} (" in message]
        assert named and all(f"era {removed[rule_id]}" in message for rule_id in named), message
        assert "--era 4.52" in message


def test_a_ruleset_knows_which_era_removes_each_rule_it_lacks():
    for era in ("4.56", "5", "portable"):
        ruleset = load_ruleset(era)
        own = {rule.id for rule in ruleset.rules}
        assert ruleset.dropped and not own & {rule.id for _, rule in ruleset.dropped}
        for by, rule in ruleset.dropped:
            assert rule.id in (FIXTURES.parent / "rules" / by / "era.toml").read_text()
