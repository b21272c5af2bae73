"""Planning: every rule of the tier plans its edits on the original tree, scoped to its role, with the file's
facts (the era's and the layout's) bound; a required rule that cannot apply is a CM901 saying why."""

from __future__ import annotations

import dataclasses
from typing import Mapping

import libcst as cst

from .. import diagnostics as codes
from ..actions import ACTIONS, ActionContext
from ..actions.together import plan_together
from ..facts.analysis import Locator, ModuleInfo
from ..facts.boundary import file_layout
from ..diagnostics import Diagnostic
from ..edit.edits import Plan, Replace
from .holes import bound_holes, find_facts, functions_in_scope
from ..edit.imports import plan_imports
from ..facts.past_length import off_axis_reads
from ..views.patterns import holes
from ..edit.render import format_statements
from ..results import Options
from .schema import ENGINE_FACTS, Era, Rule
from .vendor import helper_imports, plan_helpers
from .file_views import FileViews

# a missing fact whose reason also covers others (said once, by the first required rule that needs it)
_SAID_WITH = {"presents_start": ("presents", "presents_guard")}


def _when_holds(rule: Rule, facts: Mapping[str, str]) -> bool:
    """Every fact of ``when`` has its value (``"*"``: any value, the fact is known)."""
    return all(key in facts if value == "*" else facts.get(key) == value for key, value in rule.when.items())


def plan_rules(
    module: cst.Module,
    info: ModuleInfo,
    rules: list[Rule],
    era: Era,
    path: str,
    options: Options,
    locate: Locator,
    own: set[str] | None = None,
) -> tuple[Plan, dict[str, int], list[Diagnostic], list[Diagnostic]]:
    """Every rule's edits on the original tree, the matches per rule, the diagnostics of planning, and the notes
    of the rules that applied (their ``notice``). ``own``: the classes and functions (qualified names) of
    ``module`` when ``info`` holds those of a whole package (:mod:`cachemigrate.facts.package`): the facts are the
    package's, the rules apply in this module's own code only."""
    views = FileViews(info)
    facts = find_facts(info, era, views)
    layout = file_layout(info, views, facts.get("presents"))
    facts.update(layout.facts)
    if "entry_converter" in layout.facts:  # the heads read the tuples the base model converts on its way in
        views.set_rank(info.roles["head"] + info.roles["pretrained"], layout.boundary_rank)
    bound = bound_holes(info, facts, {**layout.filters, **layout.predicates})
    plan = Plan()
    actions = []
    matched: dict[str, int] = {}
    # diagnostics, and the actions (turned into theirs once they planned)
    reads = (
        info
        if own is None
        else dataclasses.replace(info, functions={q: info.functions[q] for q in own & set(info.functions)})
    )
    found: list = list(off_axis_reads(reads, facts, layout.boundary_key, path, locate))
    notes: list[Diagnostic] = []  # the rules' notices: said, but the file still migrates
    imports: list[str] = []
    undetermined: set[str] = set()  # facts a required rule needed that the file did not show (reported once)
    dropped: set[str] = set()  # methods an earlier rule removes (drop_override): no later rule's to edit or refuse
    for rule in rules:
        functions, classes = functions_in_scope(info, rule.role, rule.functions)
        functions = functions - dropped
        if own is not None:
            functions, classes = functions & own, classes & own
        needed = set(rule.when) | _facts_in_templates(rule, era)
        if not _when_holds(rule, facts) or not needed <= set(facts):
            # a when-fact that is known and different: the rule is not for this file, nothing to report (a fused
            # layout's CM018)
            contradicted = any(key in facts and value not in ("*", facts[key]) for key, value in rule.when.items())
            missing = [] if contradicted else sorted(needed - set(facts) - undetermined)
            if rule.required and missing and functions:
                # e.g. the legacy layout of a layer's cache: without it no rule returns the cache as a tuple
                undetermined.update(missing)
                undetermined.update(fact for name in missing for fact in _SAID_WITH.get(name, ()))
                if layout.reason and any(fact in ENGINE_FACTS for fact in missing):  # one unknown layout, said once
                    undetermined.update(ENGINE_FACTS)
                    if layout.explained:  # said by the legacy audit, at the construct itself (its uses stay)
                        continue
                on_layout = layout.reason and any(fact in ENGINE_FACTS for fact in missing)
                blocker = layout.node if on_layout and layout.node is not None else None
                if blocker is not None and own is not None and not locate.holds(blocker):
                    continue  # a package's module: said by the module that holds the blocker
                where = locate(blocker if blocker is not None else info.functions[sorted(functions)[0]].node)
                why = _why_unknown(missing, layout.reason)
                found.append(_not_applied(rule, path, where, f"cannot tell how it applies: {why}"))
            continue
        lacking = _lacking_holes(rule, functions, bound)
        if lacking:
            functions = functions - set(lacking)
            if rule.required and not functions:
                where = locate(info.functions[sorted(lacking)[0]].node)
                found.append(_not_applied(rule, path, where, _why_lacking(lacking)))
        if not functions and not classes:
            continue
        ctx = ActionContext(
            path=path,
            info=info,
            locate=locate,
            functions=functions,
            classes=classes,
            bound=bound,
            format_statements=lambda code, depth: format_statements(code, depth, options.line_length),
            line_length=options.line_length,
            options={"signature": options.signature, "deprecation_version": options.deprecation_version},
            views=views,
        )
        actions.append(ACTIONS[rule.action](rule, ctx))
        dropped |= getattr(actions[-1], "drops", set)()
        found.append(actions[-1])  # what it found, said in the rules' order once every rule planned
    # the rules' planners share one walk of the module; the actions with a plan of their own run it
    plan_together(module, [action for action in actions if action.plans_by_walking() and action.prepare(module)])
    for action in actions:
        if not action.plans_by_walking():
            action.plan(module)
    found = [item for entry in found for item in _planned(entry, info, path, locate, matched, imports, notes)]
    every = [edit for action in actions for edit in action.edits]
    for action in actions:
        action.finalize(every)
    for action in actions:
        plan.extend(action.edits)
        found.extend(action.ctx.diagnostics)
    helpers = [(entry, action.rule.path) for action in actions for entry in action.helpers_needed()]
    imports.extend(name for name in helper_imports(module, helpers) if name not in imports)
    top_level = lambda code: format_statements(code, 0, options.line_length)  # noqa: E731
    plan.extend(plan_imports(module, era, imports, top_level))
    plan.extend(plan_helpers(module, helpers, top_level))
    return plan, matched, found, notes


def _notices(rule: Rule, edits, path: str, locate: Locator) -> list[Diagnostic]:
    """The rule's notice at each place it changed (once per line)."""
    lines = sorted({locate(e.node if isinstance(e, Replace) else (e.statements or (e.block,))[0]) for e in edits})
    return [Diagnostic(path, line, column, rule.id, rule.notice) for line, column in lines]


def _planned(
    entry, info: ModuleInfo, path: str, locate: Locator, matched: dict, imports: list, notes: list
) -> list[Diagnostic]:
    """A diagnostic of planning as it is, or for an action that planned: its matches, imports and notices
    counted, and CM901 for a required rule that found nothing (and did not say why)."""
    if isinstance(entry, Diagnostic):
        return [entry]
    action, rule = entry, entry.rule
    if action.edits:
        matched[rule.id] = action.changes or len(action.edits)
        if rule.notice:
            notes.extend(_notices(rule, action.edits, path, locate))
        imports.extend(name for name in action.imports_needed() if name not in imports)
    elif rule.required and action.ctx.functions and not action.ctx.diagnostics:  # one that said why: not twice
        functions = sorted(action.ctx.functions)
        where = locate(info.functions[functions[0]].node)
        return [_not_applied(rule, path, where, f"found nothing to rewrite in {', '.join(functions)}")]
    return []


# what a rule matches (its holes capture there), not what it writes
_MATCHED_PARAMS = frozenset({"pattern", "patterns", "only_before", "old", "inside_if", "moves"})
_HOLE_WORDS = {
    "cache": "a cache parameter",
    "layers": "a list of blocks (`self.<name> = nn.ModuleList(...)`)",
    "var_kwargs": "a `**kwargs` parameter",
    "outputs": "a statement of its own body binding what its library model returns to a name "
    "(`outputs = self.transformer(...)`)",
}


def _texts(values) -> list[str]:
    return [v for v in values if isinstance(v, str)] + [t for v in values if isinstance(v, list) for t in _texts(v)]


def _lacking_holes(rule: Rule, functions: set[str], bound) -> dict[str, list[str]]:
    """The functions in the rule's scope that lack a hole its code writes and binds per function (`{cache}`, the
    function's cache parameter; `{layers}`; `{arg0}`...), and which: the rule is not applied there (the code it would
    write has nothing to name; a GPT-2 of transformers 2 has heads whose forward takes no past)."""
    written = _texts([v for k, v in rule.params.items() if k not in _MATCHED_PARAMS])
    captured = {
        hole for text in _texts([v for k, v in rule.params.items() if k in _MATCHED_PARAMS]) for hole in holes(text)
    }
    wanted = {
        hole
        for text in written
        for hole in holes(text)
        if (hole in _HOLE_WORDS or (hole.startswith("arg") and hole[3:].isdigit())) and hole not in captured
    }
    lacking = {}
    for qualname in sorted(functions):
        missing = sorted(wanted - set(bound(qualname)))
        if missing:
            lacking[qualname] = missing
    return lacking


def _why_lacking(lacking: dict[str, list[str]]) -> str:
    def words(hole: str) -> str:
        return _HOLE_WORDS.get(hole) or f"a parameter number {int(hole[3:]) + 1}"

    said = "; ".join(f"{name} has no {' and no '.join(map(words, holes))}" for name, holes in lacking.items())
    return f"cannot apply: the code it writes needs what these functions lack ({said})"


def _facts_in_templates(rule: Rule, era: Era) -> set[str]:
    """The facts a rule's templates use as bound holes (the era's and the engine's layout facts): without the fact
    the rule has nothing to fill in."""
    texts = [v for v in rule.params.values() if isinstance(v, str)]
    texts += [t for v in rule.params.values() if isinstance(v, list) for t in v if isinstance(t, str)]
    return {hole for text in texts for hole in holes(text)} & ({fact.name for fact in era.facts} | set(ENGINE_FACTS))


def _why_unknown(facts: list[str], layout_reason: str | None = None) -> str:
    layout = f"the layout of the cached keys and values is not known: {layout_reason}"
    if any(fact in ENGINE_FACTS for fact in facts):  # one reason for all of them
        facts = [fact for fact in facts if fact not in ENGINE_FACTS] + ["cache_layout"]
    said = {
        "cache_layout": layout,
        "layout": "the file never builds the present of a layer as a (key, value) tuple or a stacked tensor, so "
        "the legacy layout to give back to tuple callers is unknown",
        "presents": "the base model never starts a tuple of presents as `() if use_cache else None` (a condition that reads `use_cache`)",
    }
    said["presents_start"] = said["presents"] + (
        ", nor as `()` added to only under a test of `use_cache` (`if use_cache: presents = presents + (present,)`)"
    )
    if "presents_start" in facts:  # one reason for the three
        facts = [fact for fact in facts if fact not in ("presents", "presents_guard")]
    return "; ".join(said.get(fact, f"the file does not show its {fact}") for fact in facts)


def _not_applied(rule: Rule, path: str, where: tuple[int, int], why: str) -> Diagnostic:
    """CM901: a required rule could not be applied; says what it expected and, if the rule explains, what to do."""
    expected = rule.description[0].lower() + rule.description[1:]
    explain = f". {rule.explain}" if rule.explain else ""
    return Diagnostic(
        path, *where, codes.RULE_NOT_APPLIED, f"{rule.id} ({rule.name}) {why}: expected {expected}{explain}"
    )


def refused_patches(found: list[Diagnostic], rules: list[Rule]) -> list[Diagnostic]:
    """What a refusing rule of role ``patch`` said (CM627: a contract the era's releases do not agree on): the whole
    reason the file stays as it is, so the tuple uses it leaves are not said again."""
    ids = {rule.id for rule in rules if rule.role == "patch" and ACTIONS[rule.action].REFUSES}
    return [d for d in found if d.code in ids]
