"""The engine: apply an era's rules for one tier to one file, all or nothing, and prove what changed.

1. A text prefilter skips files that never name a cache variable (they are not parsed).
2. The file is parsed once and analysed once (:mod:`cachemigrate.facts.analysis`): roles, cache uses, facts.
3. A file with no legacy cache use is left as it is.
4. Each rule of the tier plans edits on the original tree, scoped to its role (:mod:`cachemigrate.actions`);
   the imports they need go where isort puts them (:mod:`cachemigrate.edit.imports`). Inserted code is wrapped
   at the configured width, else the file's own (:mod:`cachemigrate.edit.width`).
5. All edits are applied in one pass (:mod:`cachemigrate.edit.apply`).
6. The region proof (:mod:`cachemigrate.proof.audit`): outside what the edits claimed, the migrated text must be the
   original byte for byte. A violation is an internal error naming the rule; the file is returned unchanged.
7. The edited functions are analysed again. Any legacy use left, or any required rule that found nothing, is
   reported with the original file:line and the file is returned unchanged: never half-migrated.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import replace
import time

import libcst as cst

from . import diagnostics as codes
from .facts.analysis import Locator, ModuleInfo, analyze
from .edit.apply import ApplyError, apply_plan
from .edit.formatter import Formatter as _Formatter
from .proof.audit import Offsets, claims_of, find_violation
from .source import guard
from . import traverse
from .diagnostics import Diagnostic
from .edit.edits import Plan
from .facts.consumers import not_a_past, only_consumers, unproven_diagnostics
from .facts.converters import find_converters
from .excerpts import quote, source_line
from .edit.imports import IMPORTS_RULE
from .proof.first_step import first_step_diagnostics, past_hook_diagnostics
from .facts.past_hook import past_hooks
from .facts.heads import late_presence_diagnostics
from .facts.one_layer import one_layer_diagnostic
from .edit.past_hook import FixError, fix_past_hooks, why_not as why_not_fixed
from .proof.leftovers import edited_functions, edited_tops, leftover_diagnostics, unbound_names
from .facts.outside import explain as explain_outside
from .facts.dict_blocker import dict_layout_diagnostic, dict_parts_rules, dict_roles
from .facts.patches import refusal_diagnostic as patch_refusal, unknown_return
from .rules.planning import plan_rules, refused_patches
from .facts.reach import unreachable_cache
from .rules.removed import removed_uses
from .rules.withdrawn import note_withdrawn
from .proof.blocked import blocked_by_layout
from .results import FileResult, Options
from .rules.schema import Era, Rule, RuleSet
from .edit.suppressed import NOTHING, leave_out
from .source.suppression import skips_file
from .edit.width import infer_width


class RegionViolation(RuntimeError):
    """The migrated text differs from the original outside every claimed region: a bug in a rule or action."""

    def __init__(self, rule: str, line: int, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.line = line


# --------------------------------------------------------------------------------------------------------------
# Planning, applying and proving
# --------------------------------------------------------------------------------------------------------------


def apply_and_prove(module: cst.Module, plan: Plan, options: Options) -> cst.Module:
    """Apply the plan; raise :class:`RegionViolation` if anything changed outside the claimed regions."""
    return _apply_and_prove(module, plan, options, module.code)[0]


def _apply_and_prove(module: cst.Module, plan: Plan, options: Options, original: str) -> tuple[cst.Module, str]:
    """:func:`apply_and_prove` of the module parsed from ``original``: the new module and its text."""
    applied = apply_plan(module, plan, _Formatter(options.line_length))
    migrated = applied.module.code
    if migrated == original:
        return applied.module, migrated
    offsets = Offsets(module, original)
    violation = find_violation(original, migrated, claims_of(plan, applied.extra_claims, offsets))
    if violation is None:
        return applied.module, migrated
    rule = _culprit(module, plan, options, offsets)
    raise RegionViolation(
        rule,
        violation.line,
        f"internal error: rule {rule} changed {violation.describe()}; the file was left unchanged. This is a bug "
        "in cachemigrate or in that rule: please report it with this file",
    )


def _culprit(module: cst.Module, plan: Plan, options: Options, offsets: Offsets) -> str:
    """The first rule whose edits, added to those of the rules before it, break the region proof."""
    rules = plan.rules()
    for count in range(1, len(rules) + 1):
        partial = plan.only(set(rules[:count]))
        try:
            applied = apply_plan(module, partial, _Formatter(options.line_length))
        except ApplyError:
            return rules[count - 1]
        claims = claims_of(partial, applied.extra_claims, offsets)
        if find_violation(offsets.code, applied.module.code, claims) is not None:
            return rules[count - 1]
    return "the engine's applier"


def with_width(options: Options, code: str) -> Options:
    """``options`` with a line length: the one given, else the file's own (:func:`cachemigrate.edit.width.infer_width`)."""
    if options.line_length is not None:
        return options
    return dataclasses.replace(options, line_length=infer_width(code).columns)


def apply_rules(
    module: cst.Module,
    info: ModuleInfo,
    rules: list[Rule],
    era: Era,
    path: str,
    options: Options,
    locate: Locator | None = None,
) -> tuple[cst.Module, dict[str, int], list[Diagnostic]]:
    """Plan, apply and prove the rules over the module. Returns the new module, matches per rule, diagnostics."""
    locate = locate or Locator(module)
    options = with_width(options, module.code)
    plan, matched, found, _notes = plan_rules(module, info, rules, era, path, options, locate)
    new_module = apply_and_prove(module, plan, options)
    applied = {rule: count for rule, count in matched.items()}
    if any(edit.rule == IMPORTS_RULE for edit in plan):
        applied.setdefault(IMPORTS_RULE, 0)
        applied.pop(IMPORTS_RULE)
    return new_module, applied, found


# --------------------------------------------------------------------------------------------------------------
# One file
# --------------------------------------------------------------------------------------------------------------


def _mentions_cache(code: str, era: Era) -> bool:
    return any(name in code for name in era.cache_names)


def _parse(code: str, path: str) -> tuple[cst.Module | None, Diagnostic | None]:
    refused = guard.check(code, path)  # Python's own parser first: its syntax errors, and nesting too deep
    if refused:
        return None, refused
    try:
        return cst.parse_module(code), None
    except cst.ParserSyntaxError as exc:
        return None, Diagnostic(
            path, exc.raw_line, exc.raw_column + 1, codes.PARSE_ERROR, f"not valid Python: {exc.message}"
        )


def _no_model(info, path: str, locate: Locator) -> Diagnostic:
    """CM903 for a file with an attention (or blocks) but no model that stacks them: the model makes the Cache and
    gives each attention its layer index, so migrating the attention alone would break it (a sibling-file package
    migrated one file at a time)."""
    parts = sorted(info.roles["attention"] or info.roles["block"])
    uses = [u for u in info.legacy_uses() if u.function.split(".", 1)[0] in parts] or info.legacy_uses()
    line, column = locate(uses[0].node)
    return Diagnostic(
        path,
        line,
        column,
        codes.NO_ROLES,
        f"`{uses[0].variable}` is used as a tuple cache in {', '.join(parts[:3])}, but no model of the file builds "
        "a stack of its blocks (an `nn.ModuleList` of blocks, with a cache parameter in its forward): that model "
        "makes the Cache and gives each attention its layer index, so this file cannot be migrated alone. If the "
        "model is in another module of the package, move the classes into one file and run it again, or port the "
        "package by hand; the file was left unchanged",
    )


def _fix_hooks_then_migrate(module, before, ruleset, options, path, locate, said, done) -> FileResult:
    """--fix-past-hook: each ``past=`` generation hook renamed (:mod:`cachemigrate.edit.past_hook`), then the fixed
    file migrated; diagnostics at the original's lines, and a note at each hook fixed."""
    hooks = past_hooks(before)
    refused = [(d, why) for d, hook in zip(said, hooks) if (why := why_not_fixed(hook))]
    if refused:
        return done(
            "failed", diags=[replace(d, message=f"{d.message} (--fix-past-hook: {why})") for d, why in refused]
        )
    try:
        fixed = fix_past_hooks(module, hooks, locate)
    except FixError as exc:
        return done("error", diags=[Diagnostic(path, 1, 1, codes.REGION_VIOLATION, f"internal error: {exc}")])
    result = migrate_source(fixed.code, ruleset, replace(options, fix_past_hook=False), path)
    found = [replace(d, line=fixed.original_line(d.line)) for d in result.diagnostics]
    if result.status not in ("migrated", "clean"):
        return done(result.status, diags=found, applied=result.applied)
    notes = [
        replace(
            d,
            code=codes.PAST_HOOK_FIXED,
            message=f"{hook.function.qualname} took the past as `past`, which `generate()` has not passed since "
            "transformers 4.26 (the original never reused its cache): --fix-past-hook renamed it to "
            '`past_key_values` and kept `past` as an alias (`past_key_values = kwargs.pop("past", past_key_values)`)'
            ", so generation now reuses the cache: each step runs on the new token only (`cachemigrate probe` compares "
            "the tokens)",
        )
        for d, hook in zip(said, hooks)
    ]
    migrated = result.migrated if result.status == "migrated" else fixed.code
    return done("migrated", migrated=migrated, diags=notes + found, applied=result.applied)


def migrate_source(code: str, ruleset: RuleSet, options: Options | None = None, path: str = "<string>") -> FileResult:
    options = options or Options()
    started = time.perf_counter()
    era = ruleset.era

    def done(status: str, migrated: str = code, diags=(), applied=None) -> FileResult:
        status, diags = suppressed.explain(status, diags)  # `# cachemigrate: skip` on statements
        return FileResult(
            path, code, migrated, status, sorted(diags), dict(applied or {}), time.perf_counter() - started
        )

    suppressed = NOTHING
    dict_rules: list[Rule] = []
    if skips_file(code):  # `# cachemigrate: skip` in the file's header
        return done("skipped")
    if not _mentions_cache(code, era):
        return done("clean")
    module, error = _parse(code, path)
    if error:
        return done("failed", diags=[error])
    traverse.index(module)  # findall below the original nodes: from one index of them
    before = analyze(module, era.cache_names)
    converters = find_converters(before)
    # legacy converters keep their tuple code after a migration: alone, they leave nothing to migrate
    exempt = {c.qualname for c in converters.values()}
    legacy = [use for use in before.legacy_uses() if use.function not in exempt]
    # functions patched onto a library attention (facts/patches.py): their own rules, the library's contract; a
    # patch on the Cache API still follows the library's keyword for its cache, which changes with the release
    patch_file = bool(before.roles["patch"]) and not before.roles["attention"] and not before.roles["base_model"]
    if (not legacy or before.on_cache_api()) and not patch_file:
        return done("clean")
    locate = Locator(module, code)
    closed = unreachable_cache(before)
    if closed:
        first = before.legacy_uses()[0]
        line, column = locate(first.node)
        shown = ", ".join(closed[:3]) + (", ..." if len(closed) > 3 else "")
        note = (
            f"cache code not reachable: `{first.variable}` is used as a tuple cache in {first.function}, but no model "
            f"class of the file ({shown}) takes a cache in its forward, so no caller can pass one; the file was "
            "left unchanged (nothing to migrate)"
        )
        return done("clean", diags=[Diagnostic(path, line, column, codes.UNREACHABLE, note)])
    # no model, only functions that edit a past handed to them (facts/consumers.py): their own rules
    # (a shape the file cannot be migrated alone in, a monkeypatch or a head over a library model, is CM903's)
    consumer_file = (
        not before.roles["attention"]
        and not before.roles["base_model"]
        and only_consumers(before)
        and not explain_outside(module, before, before.legacy_uses()[0])
    )
    if consumer_file and before.unproven:
        return done("failed", diags=unproven_diagnostics(before.unproven, path, locate))
    over_library = bool(before.library_heads)  # heads over a library model: what they own migrates (facts/heads.py)
    if (
        not consumer_file
        and not patch_file
        and not over_library
        and not before.roles["attention"]
        and not before.roles["base_model"]
    ):
        refused = patch_refusal(module, before, path, locate)  # a patch of a class whose contract is unknown
        if refused:
            return done("failed", diags=[refused])
        first = before.legacy_uses()[0]
        # a dict of attention parts per layer: its era's rule moves it onto an EncoderDecoderCache, or it is
        # refused at its first blocker
        tiered = ruleset.for_tier(options.tier)
        dict_rules = dict_parts_rules(module, before, first, tiered)
        if dict_rules:  # its PreTrainedModel and heads: the rules for them apply as to any model's
            before.roles.update(dict_roles(before))
        refusal = None if dict_rules else dict_layout_diagnostic(module, before, first, era.name, path, locate, tiered)
        if refusal is not None:
            return done("failed", diags=[refusal])
    if (
        not dict_rules
        and not (consumer_file or patch_file or over_library or before.roles["attention"])
        and not (before.roles["base_model"])
    ):
        first = before.legacy_uses()[0]
        line, column = locate(first.node)
        idiom, excerpt = quote(first.idiom), source_line(code, line)
        return done(
            "failed",
            diags=[
                Diagnostic(
                    path,
                    line,
                    column,
                    codes.NO_ROLES,
                    f"`{first.variable}` is used as a tuple cache (`{idiom}`"
                    + (f" in `{excerpt}`" if excerpt != idiom else "")
                    + "), but "
                    + (
                        explain_outside(module, before, first)
                        or "no attention/block/model structure using it was recognised"
                        + not_a_past(before, first.function)
                    )
                    + "; the file was left unchanged",
                )
            ],
        )
    if not dict_rules and not consumer_file and not patch_file and not over_library and not before.roles["base_model"]:
        return done(
            "failed", diags=[one_layer_diagnostic(module, before, path, locate) or _no_model(before, path, locate)]
        )
    if late := late_presence_diagnostics(before, path, locate):  # a head's presence test after its model ran
        return done("failed", diags=late)
    hooks = past_hook_diagnostics(before, path, locate)
    if hooks and options.fix_past_hook:
        return _fix_hooks_then_migrate(module, before, ruleset, options, path, locate, hooks, done)
    if hooks:
        return done("failed", diags=hooks)
    rules = dict_rules or [rule for rule in ruleset.for_tier(options.tier) if rule.action != "dict_parts"]
    options = with_width(options, code)
    plan, matched, found, notes = plan_rules(module, before, rules, era, path, options, locate)
    refused = refused_patches(found, rules)  # a patch whose contract the era's releases do not agree on
    if refused:
        return done("failed", diags=refused)
    plan, suppressed = leave_out(module, plan, code, path)
    try:
        new_module, migrated = _apply_and_prove(module, plan, options, code)
    except RegionViolation as exc:
        return done("error", diags=[Diagnostic(path, exc.line, 1, codes.REGION_VIOLATION, str(exc))])
    except ApplyError as exc:
        message = f"internal error: {exc}; the file was left unchanged. This is a bug in cachemigrate or a rule"
        return done("error", diags=[Diagnostic(path, 1, 1, codes.REGION_VIOLATION, message)])
    try:
        ast.parse(migrated, filename=path)
    except SyntaxError as exc:
        message = f"internal error: the rewritten code does not parse ({exc.msg}); the file was left unchanged"
        return done("error", diags=[Diagnostic(path, 1, 1, codes.REGION_VIOLATION, message)])
    # the audits read a fresh parse: a filled template can put one node object in several places of new_module,
    # and the analysis finds each use's statement through its parent
    reparsed = cst.parse_module(migrated)
    edited = edited_tops(module, plan)
    functions = edited_functions(plan)
    unbound = unbound_names(module, new_module, edited, functions)
    if unbound and found:
        # a rule could not be applied, so the file stays as it is anyway: what the user can act on is why, not
        # the half-planned code the other rules would have left
        found.extend(leftover_diagnostics(before, reparsed, edited, functions, era, path, locate))
        found = blocked_by_layout(note_withdrawn(found, module, before, ruleset, options, path, locate))
        return done("failed", diags=found, applied=dict(matched))
    if unbound:
        function, names = unbound
        line, column = locate(before.functions[function].node) if function in before.functions else (1, 1)
        if function in before.roles["patch"]:  # a present returned in a form no rule rewrites
            return done("failed", diags=[unknown_return(function, names, path, (line, column))])
        message = (
            f"internal error: after the rules ran, {function} reads {', '.join(f'`{n}`' for n in sorted(names))}, "
            "which nothing binds there any more; the file was left unchanged. This is a bug in a rule: please "
            "report it with this file"
        )
        return done("error", diags=[Diagnostic(path, line, column, codes.REGION_VIOLATION, message)])
    # a construct planning explained (a CM900, or a refusal of a rule for code outside a model), said once
    refusing = {codes.UNKNOWN_IDIOM} | {rule.id for rule in rules if rule.role == "consumer"}
    said = {d.line for d in found if d.code in refusing}
    leftovers = leftover_diagnostics(before, reparsed, edited, functions, era, path, locate, converters)
    found.extend(d for d in leftovers if d.line not in said)
    found.extend(first_step_diagnostics(before, reparsed, era, path, locate))
    found.extend(removed_uses(module, new_module, era, path, locate, migrated))
    applied = {rule: count for rule, count in matched.items()}
    if found:
        found = blocked_by_layout(note_withdrawn(found, module, before, ruleset, options, path, locate))
        return done("failed", diags=found, applied=applied)
    # helpers already on the Cache API (their `len(past)` reads are), a patch already on its era's keyword
    if (consumer_file or patch_file) and migrated == code:
        return done("clean")
    return done("migrated", migrated=migrated, diags=notes, applied=applied)
