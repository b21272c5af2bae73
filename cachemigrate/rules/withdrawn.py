"""What an era withdrew, said where it matters: a tuple use left in a function (CM900) where a rule that an
ancestor era has, and this era removed (``remove`` of its era.toml), would apply gets the rule named and why it
was removed, so that "no rule rewrites this idiom" does not read as a gap nobody knew of. The withdrawn rules are
planned on the file only when there is such a diagnostic, and their edits are thrown away."""

from __future__ import annotations

import dataclasses

import libcst as cst

from .. import diagnostics as codes
from ..diagnostics import Diagnostic
from ..facts.analysis import Locator, ModuleInfo
from ..results import Options
from .holes import functions_in_scope
from .planning import plan_rules
from .schema import RuleSet

_GENERIC = " and no rule rewrites this idiom"


def note_withdrawn(
    found: list[Diagnostic],
    module: cst.Module,
    info: ModuleInfo,
    ruleset: RuleSet,
    options: Options,
    path: str,
    locate: Locator,
) -> list[Diagnostic]:
    """``found`` with each generic CM900 in a function where a withdrawn rule applies saying which rule, the era
    that has it and why this era removed it."""
    generic = [d for d in found if d.code == codes.UNKNOWN_IDIOM and _GENERIC in d.message]
    withdrawn = [w for w in ruleset.withdrawn if w.rule.in_tier(options.tier)]
    if not generic or not withdrawn:
        return found
    _, matched, _, _ = plan_rules(module, info, [w.rule for w in withdrawn], ruleset.era, path, options, locate)
    spans: list[tuple[int, int, str]] = []  # (first line, last line, what to say) per function of a matching rule
    for entry in withdrawn:
        if not matched.get(entry.rule.id):
            continue
        functions, _ = functions_in_scope(info, entry.rule.role, entry.rule.functions)
        why = f": {entry.because}" if entry.because else ""
        words = (
            f" and no rule of era {ruleset.era.name} rewrites this idiom: rule {entry.rule.id} ({entry.rule.name}) "
            f"of era {entry.rule.era} does, but era {entry.era} removed it{why}"
        )
        for qualname in functions:
            node = info.functions[qualname].node
            spans.append((locate(node)[0], locate.last_line(node), words))
    if not spans:
        return found
    result = []
    for diagnostic in found:
        words = next((w for first, last, w in spans if first <= diagnostic.line <= last), None)
        if diagnostic in generic and words is not None:
            diagnostic = dataclasses.replace(diagnostic, message=diagnostic.message.replace(_GENERIC, words, 1))
        result.append(diagnostic)
    return result
