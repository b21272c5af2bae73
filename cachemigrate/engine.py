"""The engine: apply an era's rules for one tier to one file, all or nothing, and prove what changed.

1. A text prefilter skips files that never name a cache variable (they are not parsed).
2. The file is parsed once and analysed once (:mod:`cachemigrate.analysis`): roles, cache uses, facts.
3. A file with no legacy cache use is left as it is.
4. Each rule of the tier plans edits on the original tree, scoped to its role (:mod:`cachemigrate.actions`);
   the imports they need are planned through ``AddImportsVisitor`` (:mod:`cachemigrate.imports`).
5. All edits are applied in one pass (:mod:`cachemigrate.apply`).
6. The region proof (:mod:`cachemigrate.audit`): outside what the edits claimed, the migrated text must be the
   original byte for byte. A violation is an internal error naming the rule; the file is returned unchanged.
7. The edited functions are analysed again. Any legacy use left, or any required rule that found nothing, is
   reported with the original file:line and the file is returned unchanged: never half-migrated.
"""

from __future__ import annotations

import ast
import time
from typing import Mapping

import libcst as cst

from . import diagnostics as codes
from .actions import ACTIONS, ActionContext
from .analysis import Locator, ModuleInfo, analyze, module_globals
from .apply import ApplyError, Reformat, apply_plan
from .audit import Offsets, claims_of, find_violation
from .diagnostics import Diagnostic
from .edits import Plan
from .boundary import file_layout
from .converters import Converter, find_converters
from .excerpts import source_line
from .facts import bound_holes, find_facts, functions_in_scope
from .imports import IMPORTS_RULE, plan_imports
from .names import newly_unbound
from .patterns import holes
from .reach import unreachable_cache
from .removed import removed_uses
from .render import format_statements
from .results import FileResult, Options
from .schema import ENGINE_FACTS, Era, Rule, RuleSet
from .suppressed_edits import NOTHING, leave_out
from .suppression import skips_file
from .vendor import helper_imports, plan_helpers
from .views import FileViews


class RegionViolation(RuntimeError):
    """The migrated text differs from the original outside every claimed region: a bug in a rule or action."""

    def __init__(self, rule: str, line: int, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.line = line


# --------------------------------------------------------------------------------------------------------------
# Planning, applying and proving
# --------------------------------------------------------------------------------------------------------------


def _when_holds(rule: Rule, facts: Mapping[str, str]) -> bool:
    """Every fact of ``when`` has its value (``"*"``: any value, the fact is known)."""
    return all(key in facts if value == "*" else facts.get(key) == value for key, value in rule.when.items())


class _Formatter(Reformat):
    """Black for edited code that no longer fits the line length; code that fits is kept as it is."""

    def __init__(self, line_length: int) -> None:
        self.line_length = line_length

    def _fits(self, code: str, depth: int) -> bool:
        return max(len(line) for line in code.splitlines()) + 4 * depth <= self.line_length

    def statement(self, stmt: cst.SimpleStatementLine, depth: int) -> cst.SimpleStatementLine:
        code = cst.Module(body=[stmt.with_changes(leading_lines=[])]).code
        if self._fits(code, depth):
            return stmt
        formatted = cst.parse_statement(format_statements(code, depth, self.line_length))
        return formatted.with_changes(leading_lines=stmt.leading_lines)

    def header(self, compound: cst.BaseCompoundStatement, depth: int) -> cst.BaseCompoundStatement:
        stub = compound.with_changes(
            body=cst.IndentedBlock([cst.SimpleStatementLine([cst.Pass()])]), leading_lines=[], **_no_extras(compound)
        )
        code = cst.Module(body=[stub]).code
        header = code[: code.rindex("pass")]  # the stub's body is its last line
        if self._fits(header, depth):
            return compound
        formatted = cst.parse_statement(format_statements(code, depth, self.line_length))
        if type(formatted) is not type(compound):
            return compound
        if isinstance(compound, cst.FunctionDef):
            return compound.with_changes(
                params=formatted.params,
                whitespace_before_params=formatted.whitespace_before_params,
                whitespace_before_colon=formatted.whitespace_before_colon,
                returns=formatted.returns,
            )
        return compound.with_changes(test=formatted.test, whitespace_before_test=formatted.whitespace_before_test)


def _no_extras(compound: cst.BaseCompoundStatement) -> dict:
    """A stub of a compound statement has no decorators and no ``else``."""
    if isinstance(compound, cst.FunctionDef):
        return {"decorators": []}
    return {"orelse": None}


def plan_rules(
    module: cst.Module,
    info: ModuleInfo,
    rules: list[Rule],
    era: Era,
    path: str,
    options: Options,
    locate: Locator,
) -> tuple[Plan, dict[str, int], list[Diagnostic]]:
    """Every rule's edits on the original tree, the matches per rule, and the diagnostics of planning."""
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
    found: list[Diagnostic] = []
    imports: list[str] = []
    undetermined: set[str] = set()  # facts a required rule needed that the file did not show (reported once)
    for rule in rules:
        functions, classes = functions_in_scope(info, rule.role, rule.functions)
        needed = set(rule.when) | _facts_in_templates(rule, era)
        if not _when_holds(rule, facts) or not needed <= set(facts):
            # a when-fact that is known and different: the rule is not for this file, nothing to report (a fused
            # layout's CM018)
            contradicted = any(key in facts and value not in ("*", facts[key]) for key, value in rule.when.items())
            missing = [] if contradicted else sorted(needed - set(facts) - undetermined)
            if rule.required and missing and functions:
                # e.g. the legacy layout of a layer's cache: without it no rule returns the cache as a tuple
                undetermined.update(missing)
                if layout.reason and any(fact in ENGINE_FACTS for fact in missing):  # one unknown layout, said once
                    undetermined.update(ENGINE_FACTS)
                where = locate(info.functions[sorted(functions)[0]].node)
                why = _why_unknown(missing, layout.reason)
                found.append(_not_applied(rule, path, where, f"cannot tell how it applies: {why}"))
            continue
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
        action = ACTIONS[rule.action](rule, ctx)
        edits = action.plan(module)
        actions.append(action)
        if edits:
            matched[rule.id] = action.changes or len(edits)
            imports.extend(name for name in rule.imports if name not in imports)
        elif rule.required and functions:
            where = locate(info.functions[sorted(functions)[0]].node)
            found.append(
                _not_applied(rule, path, where, f"found nothing to rewrite in {', '.join(sorted(functions))}")
            )
    every = [edit for action in actions for edit in action.edits]
    for action in actions:
        action.finalize(every)
    for action in actions:
        plan.extend(action.edits)
        found.extend(action.ctx.diagnostics)
    helpers = [(entry, action.rule.path) for action in actions for entry in action.helpers_needed()]
    imports.extend(name for name in helper_imports(module, helpers) if name not in imports)
    plan.extend(plan_imports(module, era, imports))
    plan.extend(plan_helpers(module, helpers, lambda code: format_statements(code, 0, options.line_length)))
    return plan, matched, found


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
    return "; ".join(said.get(fact, f"the file does not show its {fact}") for fact in facts)


def apply_and_prove(module: cst.Module, plan: Plan, options: Options) -> cst.Module:
    """Apply the plan; raise :class:`RegionViolation` if anything changed outside the claimed regions."""
    applied = apply_plan(module, plan, _Formatter(options.line_length))
    original, migrated = module.code, applied.module.code
    if migrated == original:
        return applied.module
    offsets = Offsets(module)
    violation = find_violation(original, migrated, claims_of(plan, applied.extra_claims, offsets))
    if violation is None:
        return applied.module
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
        if find_violation(module.code, applied.module.code, claims) is not None:
            return rules[count - 1]
    return "the engine's applier"


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
    plan, matched, found = plan_rules(module, info, rules, era, path, options, locate)
    new_module = apply_and_prove(module, plan, options)
    applied = {rule: count for rule, count in matched.items()}
    if any(edit.rule == IMPORTS_RULE for edit in plan):
        applied.setdefault(IMPORTS_RULE, 0)
        applied.pop(IMPORTS_RULE)
    return new_module, applied, found


def _not_applied(rule: Rule, path: str, where: tuple[int, int], why: str) -> Diagnostic:
    """CM901: a required rule could not be applied; says what it expected and, if the rule explains, what to do."""
    expected = rule.description[0].lower() + rule.description[1:]
    explain = f". {rule.explain}" if rule.explain else ""
    return Diagnostic(
        path, *where, codes.RULE_NOT_APPLIED, f"{rule.id} ({rule.name}) {why}: expected {expected}{explain}"
    )


# --------------------------------------------------------------------------------------------------------------
# What is left over
# --------------------------------------------------------------------------------------------------------------


def _edited_tops(original: cst.Module, plan: Plan) -> set[str]:
    """Names of the top-level classes and functions that hold an edit."""
    names = set()
    for edit in plan:
        path = edit.path
        top = path[1] if len(path) > 1 else getattr(edit, "node", None)
        if isinstance(top, (cst.ClassDef, cst.FunctionDef)):
            names.add(top.name.value)
    return names


def _functions_of(module: cst.Module, tops: set[str]) -> dict[str, cst.FunctionDef]:
    """The functions and methods of the named top-level classes and functions, by qualified name."""
    found = {}
    for stmt in module.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value in tops:
            found[stmt.name.value] = stmt
        elif isinstance(stmt, cst.ClassDef) and stmt.name.value in tops:
            for member in stmt.body.body:
                if isinstance(member, cst.FunctionDef):
                    found[f"{stmt.name.value}.{member.name.value}"] = member
    return found


def _edited_functions(plan: Plan) -> set[str]:
    """Qualified names of the functions and methods that hold an edit (or whose header an edit changed)."""
    names = set()
    for edit in plan:
        chain = [*edit.path, getattr(edit, "node", None)]
        owner = None
        for node in chain:
            if isinstance(node, cst.ClassDef) and owner is None:
                owner = node.name.value
            elif isinstance(node, cst.FunctionDef):
                names.add(f"{owner}.{node.name.value}" if owner else node.name.value)
                break
    return names


def _unbound_names(
    original: cst.Module, migrated: cst.Module, edited: set[str], functions: set[str]
) -> tuple[str, set[str]] | None:
    """The first edited function that reads a name nothing binds any more (see :mod:`cachemigrate.names`)."""
    before, after = _functions_of(original, edited), _functions_of(migrated, edited)
    after = {name: node for name, node in after.items() if name in functions}
    globals_before, globals_after = module_globals(original), module_globals(migrated)
    for qualname, function in after.items():
        if qualname in before:
            names = newly_unbound(before[qualname], function, globals_before, globals_after)
            if names:
                return qualname, names
    return None


def _leftover_diagnostics(
    before: ModuleInfo,
    new_module: cst.Module,
    edited: set[str],
    functions: set[str],
    era: Era,
    path: str,
    locate: Locator,
    converters: Mapping[str, Converter] = {},
) -> list[Diagnostic]:
    """Legacy uses still present after the rules ran, located in the original file. Only the edited functions
    are analysed again; the others keep the uses found before.

    The file's legacy converters (:mod:`cachemigrate.converters`) only ever handle tuples and keep their tuple
    code; handing them a cache outside a tuple-only branch is a legacy use (a Cache could reach them)."""
    changed = [s for s in new_module.body if isinstance(s, (cst.ClassDef, cst.FunctionDef)) and s.name.value in edited]
    after = analyze(cst.Module(body=changed), era.cache_names, only=functions)
    reanalysed = {q for q in after.functions if q in functions}
    exempt = {c.qualname for c in converters.values()}
    calls = {f"self.{name}" for name in converters}

    def leftovers(fn) -> list:
        if fn.qualname in exempt:
            return []
        return [u for u in fn.uses if u.kind == "legacy" or (u.kind == "pass" and u.idiom in calls)]

    kept = [use for fn in before.functions.values() if fn.qualname not in reanalysed for use in leftovers(fn)]
    originals: dict[tuple, list] = {}
    for use in (u for fn in before.functions.values() for u in leftovers(fn)):
        originals.setdefault((use.function, use.statement, use.idiom), []).append(use)
    code = locate.module.code
    # one diagnostic per statement (a statement reading `past[0]` and `past[1]` is one construct)
    grouped: dict[tuple, list] = {}
    for use in [*kept, *(u for q in reanalysed for u in leftovers(after.functions[q]))]:
        matches = originals.get((use.function, use.statement, use.idiom))
        if matches:
            line, column = locate(matches.pop(0).node)
        else:
            fn = before.functions.get(use.function)
            line, column = locate(fn.node if fn else None)
        grouped.setdefault((use.function, use.statement), []).append((line, column, use))
    result = []
    for (function, _), uses in grouped.items():
        line, column, first = min(uses, key=lambda found: found[:2])
        idioms = list(dict.fromkeys(f"`{use.idiom}`" for _, _, use in sorted(uses, key=lambda found: found[:2])))
        excerpt = source_line(code, line)
        where = f" in `{excerpt}`" if excerpt else ""
        if first.kind == "pass":
            what = (
                f"`{first.variable}` is handed to `{first.idiom}`, which converts legacy tuples only, in {function}"
                f"{where}, where a Cache can reach it,"
            )
        else:
            what = f"`{first.variable}` is used as a tuple cache in {function} ({', '.join(idioms)}{where})"
        message = (
            f"{what} and no rule rewrites this idiom; the file was left unchanged. Migrate this statement by hand "
            "or add a rule for it"
        )
        result.append(Diagnostic(path, line, column, codes.UNKNOWN_IDIOM, message))
    return result


# --------------------------------------------------------------------------------------------------------------
# One file
# --------------------------------------------------------------------------------------------------------------


def _mentions_cache(code: str, era: Era) -> bool:
    return any(name in code for name in era.cache_names)


def _parse(code: str, path: str) -> tuple[cst.Module | None, Diagnostic | None]:
    try:
        return cst.parse_module(code), None
    except cst.ParserSyntaxError as exc:
        return None, Diagnostic(
            path, exc.raw_line, exc.raw_column + 1, codes.PARSE_ERROR, f"not valid Python: {exc.message}"
        )


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
    if skips_file(code):  # `# cachemigrate: skip` in the file's header
        return done("skipped")
    if not _mentions_cache(code, era):
        return done("clean")
    module, error = _parse(code, path)
    if error:
        return done("failed", diags=[error])
    before = analyze(module, era.cache_names)
    converters = find_converters(before)
    # legacy converters keep their tuple code after a migration: alone, they leave nothing to migrate
    exempt = {c.qualname for c in converters.values()}
    if not [use for use in before.legacy_uses() if use.function not in exempt] or before.on_cache_api():
        return done("clean")
    locate = Locator(module)
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
    if not before.roles["attention"] and not before.roles["base_model"]:
        first = before.legacy_uses()[0]
        line, column = locate(first.node)
        return done(
            "failed",
            diags=[
                Diagnostic(
                    path,
                    line,
                    column,
                    codes.NO_ROLES,
                    f"`{first.variable}` is used as a tuple cache (`{first.idiom}` in "
                    f"`{source_line(module.code, line)}`), but no attention/block/model structure using it was "
                    "recognised; the file was left unchanged",
                )
            ],
        )
    rules = ruleset.for_tier(options.tier)
    plan, matched, found = plan_rules(module, before, rules, era, path, options, locate)
    plan, suppressed = leave_out(module, plan, code, path)
    try:
        new_module = apply_and_prove(module, plan, options)
    except RegionViolation as exc:
        return done("error", diags=[Diagnostic(path, exc.line, 1, codes.REGION_VIOLATION, str(exc))])
    except ApplyError as exc:
        message = f"internal error: {exc}; the file was left unchanged. This is a bug in cachemigrate or a rule"
        return done("error", diags=[Diagnostic(path, 1, 1, codes.REGION_VIOLATION, message)])
    migrated = new_module.code
    try:
        ast.parse(migrated, filename=path)
    except SyntaxError as exc:
        message = f"internal error: the rewritten code does not parse ({exc.msg}); the file was left unchanged"
        return done("error", diags=[Diagnostic(path, 1, 1, codes.REGION_VIOLATION, message)])
    edited = _edited_tops(module, plan)
    functions = _edited_functions(plan)
    unbound = _unbound_names(module, new_module, edited, functions)
    if unbound and found:
        # a rule could not be applied, so the file stays as it is anyway: what the user can act on is why, not
        # the half-planned code the other rules would have left
        found.extend(_leftover_diagnostics(before, new_module, edited, functions, era, path, locate))
        return done("failed", diags=found, applied=dict(matched))
    if unbound:
        function, names = unbound
        line, column = locate(before.functions[function].node) if function in before.functions else (1, 1)
        message = (
            f"internal error: after the rules ran, {function} reads {', '.join(f'`{n}`' for n in sorted(names))}, "
            "which nothing binds there any more; the file was left unchanged. This is a bug in a rule: please "
            "report it with this file"
        )
        return done("error", diags=[Diagnostic(path, line, column, codes.REGION_VIOLATION, message)])
    found.extend(_leftover_diagnostics(before, new_module, edited, functions, era, path, locate, converters))
    found.extend(removed_uses(module, new_module, era, path, locate))
    applied = {rule: count for rule, count in matched.items()}
    if found:
        return done("failed", diags=found, applied=applied)
    return done("migrated", migrated=migrated, applied=applied)
