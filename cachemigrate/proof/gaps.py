"""Era gaps: a legacy use that no rule of the era rewrites, where an era it extends has a rule for it that this era
removes (``remove`` in its era.toml) because the rule writes an API the era's runtime lacks. The CM900 for such a
use names that rule and the missing API instead of inviting the user to add a rule.

Found by planning the removed rules on the original file (only when a CM900 is to be written): a removed rule
that rewrites code (``replace_expression``, ``replace_statements``) and matches in a function explains the uses
left in that function.
"""

from __future__ import annotations

import functools
from typing import Callable

import libcst as cst

from ..facts.analysis import Locator, ModuleInfo
from ..results import Options
from ..rules.eras import runtime_of
from ..rules.holes import functions_in_scope
from ..rules.loader import removed_names_written
from ..rules.planning import plan_rules
from ..rules.schema import Rule, RuleSet

REWRITES = ("replace_expression", "replace_statements")  # actions that take a legacy idiom away


def era_gaps(
    module: cst.Module, info: ModuleInfo, ruleset: RuleSet, options: Options, path: str, locate: Locator
) -> Callable[[str], str | None]:
    """``gap(function)``: what the era lacks to migrate the legacy uses left in ``function`` (the end of a CM900
    sentence), or None. The removed rules are planned on the first call only."""

    @functools.lru_cache(maxsize=None)
    def by_function() -> dict[str, list[tuple[str, Rule]]]:
        removed = [(by, r) for by, r in ruleset.dropped if r.action in REWRITES and r.in_tier(options.tier)]
        if not removed:
            return {}
        try:
            _, matched, _ = plan_rules(module, info, [r for _, r in removed], ruleset.era, path, options, locate)
        except Exception:  # a rule planned outside its own era: no explanation rather than a crash
            return {}
        found: dict[str, list[tuple[str, Rule]]] = {}
        for by, rule in removed:
            if matched.get(rule.id):
                for function in functions_in_scope(info, rule.role, rule.functions)[0]:
                    found.setdefault(function, []).append((by, rule))
        return found

    def gap(function: str) -> str | None:
        rules = by_function().get(function)
        return _wording(rules, ruleset) if rules else None

    return gap


def _wording(removed: list[tuple[str, Rule]], ruleset: RuleSet) -> str:
    era = ruleset.era
    rules = [rule for _, rule in removed]
    named = ", ".join(f"{r.id} ({r.name})" for r in rules)
    older = ", ".join(dict.fromkeys(r.era for r in rules))
    removers = list(dict.fromkeys(by for by, _ in removed))
    lacks = list(dict.fromkeys(name for rule in rules for name in removed_names_written(rule, era)))
    if lacks:
        why = (
            f"{'they write' if len(rules) > 1 else 'it writes'} {', '.join(f'`{n}`' for n in lacks)}, which the "
            f"runtime of era {era.name} (transformers {era.runtime}) does not have"
        )
    else:
        why = "see `remove` in " + ", ".join(f"rules/{by}/era.toml" for by in removers)
    them = "those rules" if len(rules) > 1 else "that rule"
    return (
        f"and era {era.name} has no rule for this idiom: {named} of era {older} "
        f"{'rewrite' if len(rules) > 1 else 'rewrites'} it, but era {' and '.join(removers)} removes {them} ({why}). "
        f"The file was left unchanged: target the era of the runtime it runs on (--era {rules[0].era} for "
        f"transformers {runtime_of(rules[0].era) or 'of that era'}), or migrate this statement by hand"
    )
