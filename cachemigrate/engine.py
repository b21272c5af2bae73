"""The engine: apply an era's rules for one tier to one file, all or nothing.

1. A text prefilter skips files that never name a cache variable (they are not parsed).
2. The file is parsed and analysed (:mod:`cachemigrate.analysis`): roles, cache uses, facts.
3. A file with no legacy cache use is left as it is.
4. Each rule of the tier runs as its own libcst transformer, scoped to its role.
5. The needed imports are added with ``AddImportsVisitor``.
6. The result is analysed again. Any legacy use left, or any required rule that found nothing, is reported
   with the original file:line and the file is returned unchanged: never half-migrated.
7. Black formats the whole result only if the original was black-clean.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Mapping

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from . import diagnostics as codes
from .actions import ACTIONS, ActionContext
from .analysis import Locator, ModuleInfo, analyze
from .diagnostics import Diagnostic
from .patterns import compile_statements, match_statements
from .render import format_file, format_statements, is_black_clean
from .rules import Era, Rule, RuleSet


@dataclasses.dataclass
class Options:
    tier: str = "dynamic"
    line_length: int = 88
    format_whole_file: bool = True  # only ever applied when the file was black-clean before
    signature: str = "end"  # "end": new parameters go last; "upstream": where the upstream ports put them
    deprecation_version: str | None = None  # the version @deprecate_kwarg names (default: the rule's)


@dataclasses.dataclass
class FileResult:
    path: str
    original: str
    migrated: str
    status: str  # "migrated" | "clean" (nothing legacy) | "failed" (diagnostics, unchanged)
    diagnostics: list[Diagnostic] = dataclasses.field(default_factory=list)
    applied: dict[str, int] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    @property
    def changed(self) -> bool:
        return self.migrated != self.original

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "status": self.status,
            "changed": self.changed,
            "applied": self.applied,
            "seconds": round(self.seconds, 3),
            "diagnostics": [d.to_json() for d in self.diagnostics],
        }


# --------------------------------------------------------------------------------------------------------------
# Facts and scopes
# --------------------------------------------------------------------------------------------------------------


def _functions_in_scope(info: ModuleInfo, role: str, names: tuple[str, ...]) -> tuple[set[str], set[str]]:
    if role == "any":
        classes = set(info.classes)
        functions = {q for q, f in info.functions.items() if f.name in names or "*" in names}
        return functions, classes
    classes = set(info.roles.get(role, []))
    functions = {
        q
        for q, f in info.functions.items()
        if f.cls in classes and (f.name in names or ("*" in names and f.cache_params))
    }
    return functions, classes


def _find_facts(info: ModuleInfo, era: Era) -> dict[str, str]:
    facts: dict[str, str] = {}
    for fact in era.facts:
        functions, _ = _functions_in_scope(info, fact.role, fact.functions)
        value = next(
            (
                value
                for case in fact.cases
                for qualname in sorted(functions)
                for value in _fact_values(case, info.functions[qualname].node)
            ),
            fact.default,
        )
        if value is not None:
            facts[fact.name] = value
    return facts


def _fact_values(case: Mapping, node: cst.FunctionDef):
    """Values the fact case gives in one function, for every place its pattern matches."""
    pattern = compile_statements(case["pattern"])
    for block in m.findall(node, m.IndentedBlock()):
        for index in range(len(block.body)):
            captures = match_statements(pattern, block.body, index, {})
            if captures is not None:
                yield case.get("value") or _code(captures[case["capture"]])


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _bound_holes(info: ModuleInfo, facts: Mapping[str, str]):
    layers = {}
    for name in info.roles["base_model"]:
        cls = info.classes[name]
        for attr, block in cls.module_lists.items():
            if block in info.roles["block"]:
                layers[name] = f"self.{attr}"

    def bound(qualname: str | None) -> dict[str, str]:
        values = dict(facts)
        fn = info.functions.get(qualname) if qualname else None
        if fn is not None and fn.cache_params:
            values["cache"] = fn.cache_params[0]
        if fn is not None:
            arguments = [p for p in fn.params if p not in ("self", "cls")]
            values.update({f"arg{i}": name for i, name in enumerate(arguments)})
        if fn is not None and fn.cls in layers:
            values["layers"] = layers[fn.cls]
        return values

    return bound


# --------------------------------------------------------------------------------------------------------------
# Imports
# --------------------------------------------------------------------------------------------------------------


def _add_imports(module: cst.Module, era: Era, names: list[str]) -> cst.Module:
    """Add the imports the applied rules need, through libcst's ``AddImportsVisitor``.

    An entry is ``Name`` (from the era's cache module), ``module.path:Name`` (a module of transformers, e.g.
    ``utils.deprecation:deprecate_kwarg``) or ``stdlib_module:Name`` (``typing:Optional``). transformers modules
    are imported in the style of the file's own: relative (``from ...cache_utils``) inside the transformers
    package, absolute elsewhere."""
    if not names:
        return module
    relative = 0
    for node in m.findall(module, m.ImportFrom(module=m.Name("modeling_utils"))):
        if node.relative:
            relative = len(node.relative)
            break
    context = CodemodContext()
    for entry in names:
        source, _, name = entry.rpartition(":")
        source = source or era.cache_module
        if source.split(".")[0] in sys.stdlib_module_names:
            AddImportsVisitor.add_needed_import(context, source, name)
        elif relative:
            AddImportsVisitor.add_needed_import(context, source, name, relative=relative)
        else:
            AddImportsVisitor.add_needed_import(context, f"transformers.{source}", name)
    # AddImportsVisitor only edits the import section at the top of the file, but walks the whole tree to
    # find it. Hand it the head of the module (everything before the first class or function) and splice.
    split = next(
        (i for i, stmt in enumerate(module.body) if isinstance(stmt, (cst.ClassDef, cst.FunctionDef))),
        len(module.body),
    )
    head = module.with_changes(body=module.body[:split])
    new_head = AddImportsVisitor(context).transform_module(head)
    return module.with_changes(body=[*new_head.body, *module.body[split:]], header=new_head.header)


# --------------------------------------------------------------------------------------------------------------
# Migration
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


def _when_holds(rule: Rule, facts: Mapping[str, str]) -> bool:
    return all(facts.get(key) == value for key, value in rule.when.items())


def apply_rules(
    module: cst.Module,
    info: ModuleInfo,
    rules: list[Rule],
    era: Era,
    path: str,
    options: Options,
    locate: Locator | None = None,
) -> tuple[cst.Module, dict[str, int], list[Diagnostic]]:
    """Run each rule's action over the module. Returns the new module, changes per rule, diagnostics."""
    locate = locate or Locator(module)
    facts = _find_facts(info, era)
    bound = _bound_holes(info, facts)
    applied: dict[str, int] = {}
    found: list[Diagnostic] = []
    imports: list[str] = []
    undetermined: set[str] = set()  # facts a required rule needed that the file did not show (reported once)
    for rule in rules:
        if not _when_holds(rule, facts):
            missing = sorted(set(rule.when) - set(facts) - undetermined)
            functions, _ = _functions_in_scope(info, rule.role, rule.functions)
            if rule.required and missing and functions:
                # e.g. the legacy layout of a layer's cache: without it no rule returns the cache as a tuple
                undetermined.update(missing)
                facts_text = ", ".join(f"`{fact}`" for fact in missing)
                found.append(
                    _not_applied(
                        rule,
                        path,
                        locate(info.functions[sorted(functions)[0]].node),
                        f"cannot tell whether it applies: no statement of the file shows its {facts_text} "
                        f"(a fact of {era.path.name})",
                    )
                )
            continue
        functions, classes = _functions_in_scope(info, rule.role, rule.functions)
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
        )
        action = ACTIONS[rule.action](rule, ctx)
        module = module.visit(action.transformer())
        found.extend(ctx.diagnostics)
        if action.changes:
            applied[rule.id] = action.changes
            imports.extend(name for name in rule.imports if name not in imports)
        elif rule.required and functions:
            where = locate(info.functions[sorted(functions)[0]].node)
            found.append(
                _not_applied(rule, path, where, f"found nothing to rewrite in {', '.join(sorted(functions))}")
            )
    return _add_imports(module, era, imports), applied, found


def _not_applied(rule: Rule, path: str, where: tuple[int, int], why: str) -> Diagnostic:
    """CM901: a required rule could not be applied; says what it expected and, if the rule explains, what to do."""
    expected = rule.description[0].lower() + rule.description[1:]
    explain = f". {rule.explain}" if rule.explain else ""
    return Diagnostic(
        path, *where, codes.RULE_NOT_APPLIED, f"{rule.id} ({rule.name}) {why}: expected {expected}{explain}"
    )


def _leftover_diagnostics(before: ModuleInfo, after: ModuleInfo, path: str, locate: Locator) -> list[Diagnostic]:
    """Legacy uses still present after the rules ran, located in the original file."""
    originals: dict[tuple, list] = {}
    for use in before.legacy_uses():
        originals.setdefault((use.function, use.statement, use.idiom), []).append(use)
    result = []
    for use in after.legacy_uses():
        matches = originals.get((use.function, use.statement, use.idiom))
        if matches:
            line, column = locate(matches.pop(0).node)
        else:
            fn = before.functions.get(use.function)
            line, column = locate(fn.node if fn else None)
        result.append(
            Diagnostic(
                path,
                line,
                column,
                codes.UNKNOWN_IDIOM,
                f"`{use.variable}` is used as a tuple cache in {use.function} (`{use.idiom}` in `{use.statement}`) "
                "and no rule rewrites this idiom; the file was left unchanged. Migrate this statement by hand "
                "or add a rule for it",
            )
        )
    return result


def migrate_source(code: str, ruleset: RuleSet, options: Options | None = None, path: str = "<string>") -> FileResult:
    options = options or Options()
    started = time.perf_counter()
    era = ruleset.era

    def done(status: str, migrated: str = code, diags=(), applied=None) -> FileResult:
        return FileResult(
            path, code, migrated, status, sorted(diags), dict(applied or {}), time.perf_counter() - started
        )

    if not _mentions_cache(code, era):
        return done("clean")
    module, error = _parse(code, path)
    if error:
        return done("failed", diags=[error])
    before = analyze(module, era.cache_names)
    if not before.legacy_uses():
        return done("clean")
    locate = Locator(module)
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
                    f"`{first.variable}` is used as a tuple cache (`{first.idiom}`), but no attention/block/model "
                    "structure using it was recognised; the file was left unchanged",
                )
            ],
        )
    new_module, applied, found = apply_rules(
        module, before, ruleset.for_tier(options.tier), era, path, options, locate
    )
    migrated = new_module.code
    after_module, error = _parse(migrated, path)
    if error:  # a rule produced invalid code: an internal error
        raise RuntimeError(f"{path}: the rewritten code does not parse ({error.message}); this is a bug in a rule")
    found.extend(_leftover_diagnostics(before, analyze(after_module, era.cache_names), path, locate))
    if found:
        return done("failed", diags=found, applied=applied)
    if options.format_whole_file and is_black_clean(code, options.line_length):
        migrated = format_file(migrated, options.line_length)
    return done("migrated", migrated=migrated, applied=applied)
