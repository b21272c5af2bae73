"""The engine over a package: the sibling modules of one folder migrated as one model, all of them or none.

The modules are parsed once each and analysed together (:mod:`cachemigrate.facts.package`): the roles, layouts and
facts are the package's, so the model in one module, its blocks in a second and their attention in a third are
migrated as the engine migrates them in one file (:mod:`cachemigrate.engine`). Each module is then planned, applied
and proven on its own: the rules apply to its own classes and functions, the imports a rule needs land in the module
whose code it changed, the region proof, the unbound-name proof and the legacy audit run per module and locate what
they find in that module's file. A module that fails any of them leaves every module unchanged: a model that hands
a Cache to an attention that indexes a tuple would be wrong.
"""

from __future__ import annotations

import ast
import time
from pathlib import Path

import libcst as cst

from . import diagnostics as codes
from . import traverse
from .diagnostics import Diagnostic
from .edit.apply import ApplyError
from .edit.suppressed import leave_out
from .engine import RegionViolation, _apply_and_prove, _parse, with_width
from .facts import package as pkg
from .facts.analysis import Locator, ModuleInfo
from .facts.converters import find_converters
from .proof.first_step import first_step_diagnostics, past_hook_diagnostics
from .proof.leftovers import (
    edited_functions,
    edited_tops,
    leftover_diagnostics,
    unbound_names,
)
from .results import FileResult, Options
from .rules.planning import plan_rules
from .rules.removed import removed_uses
from .rules.schema import RuleSet
from .source.suppression import skips_file


def _at(member: pkg.Member, node: cst.CSTNode | None, code: str, message: str) -> Diagnostic:
    line, column = Locator(member.module, member.code)(node)
    return Diagnostic(member.path, line, column, code, message)


def _refusal(members: list[pkg.Member], info: ModuleInfo | None, cache_names=()) -> Diagnostic | None:
    """Why the package cannot be analysed as one model, at the import or class that causes it; None if it can."""
    cycle = pkg.import_cycle(members)
    if cycle:
        steps = [
            f"{member.name}:{Locator(member.module, member.code)(node)[0]} imports {_imported(cycle, i)}"
            for i, (member, node) in enumerate(cycle)
        ]
        member, node = cycle[-1]
        return _at(
            member,
            node,
            codes.PACKAGE,
            f"the package's modules import each other in a cycle ({', '.join(steps)}): the tool analyses each "
            "module after the modules it imports and cannot order these, so it cannot tell which module's classes "
            "the others build; the package was left unchanged (import one of them inside a function, or merge "
            "them)",
        )
    twice = pkg.defined_twice(members, cache_names)
    if twice:
        name, first, node = twice
        member = next(m for m in members if node in m.module.body)
        what = "class" if isinstance(node, cst.ClassDef) else "function"
        return _at(
            member,
            node,
            codes.PACKAGE,
            f"{what} {name} is defined in {first.name} and again in {member.name}: the package's modules are "
            "analysed as one model, and the tool cannot tell which of the two a sibling means; the package was "
            "left unchanged",
        )
    if info is not None:
        outside = pkg.handed_outside(info, members)
        if outside and not info.roles["base_model"]:
            member, cls, built, node = outside
            source = member.outside[built][0]
            return _at(
                member,
                node,
                codes.PACKAGE,
                f"{cls}, built from {built}, which {member.name} imports from `{source}`, outside the "
                f"package: the code that reads the cache as a tuple is not in the package, so the model cannot hand "
                f"that module a Cache; the package was left unchanged (put {built} in the package's folder, or "
                "migrate the module it comes from first)",
            )
    return None


def _imported(cycle, index: int) -> str:
    """The module the ``index``-th import of a cycle imports (``from .b import X``: ``b``)."""
    return cycle[(index + 1) % len(cycle)][0].stem


def migrate_package(sources: dict[str, str], ruleset: RuleSet, options: Options | None = None) -> list[FileResult]:
    """Migrate the modules of one package (path -> text) together: a result per module, all migrated or all left
    unchanged (each module to blame with its diagnostics, the others with a CM920 note naming the first of them)."""
    options = options or Options()
    started = time.perf_counter()
    era = ruleset.era

    def results(migrated: dict[str, str], status: str, diags=(), applied=None) -> list[FileResult]:
        seconds = time.perf_counter() - started
        by_path: dict[str, list] = {path: [] for path in sources}
        for diagnostic in diags:
            by_path.setdefault(diagnostic.path, []).append(diagnostic)
        blamed = [d for d in sorted(diags) if d.code != codes.WITH_SIBLINGS]
        if status in ("failed", "error") and blamed:  # the modules not to blame say why they were left as well
            first = blamed[0]
            why = (
                f"left unchanged with its package: a package is migrated all or none, and {Path(first.path).name}"
                f":{first.line} could not be migrated ({first.code})"
            )
            for path, found in by_path.items():
                if not found:
                    found.append(Diagnostic(path, 1, 1, codes.PACKAGE, why))
        return [
            FileResult(
                path,
                code,
                migrated.get(path, code),
                "clean" if status == "migrated" and path not in migrated else status,
                sorted(by_path[path]),
                dict((applied or {}).get(path, {})),
                seconds,
            )
            for path, code in sources.items()
        ]

    marked = [path for path, code in sources.items() if skips_file(code)]
    if marked:  # `# cachemigrate: skip` in a module's header: the package is left as it is
        why = (
            f"left unchanged: {Path(marked[0]).name}, a module of the same package, is marked `# cachemigrate: skip`, "
            "and a package is migrated all or none"
        )
        notes = [Diagnostic(path, 1, 1, codes.PACKAGE, why) for path in sources if path not in marked]
        return results({}, "skipped", notes)
    members: list[pkg.Member] = []
    for path, code in sources.items():
        module, error = _parse(code, path)
        if error:
            return results({}, "failed", [error])
        members.append(pkg.Member(path, code, module))
    siblings = {member.stem for member in members}
    for member in members:
        pkg.read_imports(member, siblings)
    refused = _refusal(members, None, era.cache_names)
    if refused:
        return results({}, "failed", [refused])
    members = pkg.in_import_order(members)
    module = pkg.combined(members)
    traverse.index(module)
    info = pkg.analyze_package(members, module, era.cache_names)
    exempt = {c.qualname for c in find_converters(info).values()}
    if not [use for use in info.legacy_uses() if use.function not in exempt] or info.on_cache_api():
        return results({}, "clean")
    refused = _refusal(members, info, era.cache_names)
    if refused:
        return results({}, "failed", [refused])
    if not info.roles["base_model"] or not info.roles["attention"]:
        return results({}, "failed", [_no_model(members, info)])
    migrated: dict[str, str] = {}
    applied: dict[str, dict] = {}
    found: list[Diagnostic] = []
    notes: list[Diagnostic] = []
    statuses = set()
    for member in members:
        status, text, diags, matched = _migrate_member(member, info, ruleset, options)
        statuses.add(status)
        if status == "migrated":
            migrated[member.path], applied[member.path] = text, matched
            notes.extend(diags)
        else:
            found.extend(diags)
    if "error" in statuses:
        return results({}, "error", found)
    if found:
        return results({}, "failed", found)
    if not migrated:
        return results({}, "clean")
    return results(migrated, "migrated", notes, applied)


def _no_model(members: list[pkg.Member], info: ModuleInfo) -> Diagnostic:
    """CM903 for a package whose modules, together, have no attention or no model that stacks its blocks."""
    first = info.legacy_uses()[0]
    owner = pkg.owners(members)[first.function.split(".", 1)[0]]
    names = ", ".join(member.name for member in members)
    return _at(
        owner,
        first.node,
        codes.NO_ROLES,
        f"`{first.variable}` is used as a tuple cache in {first.function}, but no model of the package ({names}) "
        "builds a stack of blocks that hands the cache on to an attention (an `nn.ModuleList` of blocks, with a "
        "cache parameter in its forward), even with the classes the modules import from each other; the package "
        "was left unchanged",
    )


def _migrate_member(member: pkg.Member, info: ModuleInfo, ruleset: RuleSet, options: Options):
    """(status, migrated text, diagnostics or notes, matches per rule) of one module, planned with the package's
    facts over its own code and proven alone; what a statement marked `# cachemigrate: skip` caused is said so
    (CM907), as for one file."""
    suppressed = []
    status, text, diags, matched = _member(member, info, ruleset, options, suppressed)
    if suppressed and status in ("failed", "error"):
        status, diags = suppressed[0].explain(status, diags)
    return status, text, diags, matched


def _member(member: pkg.Member, info: ModuleInfo, ruleset: RuleSet, options: Options, suppressed: list):
    era, path, code, module = ruleset.era, member.path, member.code, member.module
    own_info = pkg.member_info(info, member)
    own = set(own_info.functions) | {s.name.value for s in module.body if isinstance(s, cst.ClassDef)}
    locate = Locator(module, code)
    if not [use for use in own_info.legacy_uses()] and not _takes_part(own_info, info):
        return "clean", code, [], {}
    hooks = past_hook_diagnostics(own_info, path, locate)
    if hooks:
        return "failed", code, hooks, {}
    rules = ruleset.for_tier(options.tier)
    options = with_width(options, code)
    plan, matched, found, notes = plan_rules(module, info, rules, era, path, options, locate, own=own)
    plan, dropped = leave_out(module, plan, code, path)
    suppressed.append(dropped)
    try:
        new_module, migrated = _apply_and_prove(module, plan, options, code)
        ast.parse(migrated, filename=path)
    except (RegionViolation, ApplyError, SyntaxError) as exc:
        line = getattr(exc, "line", 1) or 1
        message = f"internal error: {exc}; the package was left unchanged. This is a bug in cachemigrate or a rule"
        return "error", code, [Diagnostic(path, line, 1, codes.REGION_VIOLATION, message)], {}
    reparsed = cst.parse_module(migrated)
    edited, functions = edited_tops(module, plan), edited_functions(plan)
    unbound = unbound_names(module, new_module, edited, functions)
    if unbound and not found:
        function, names = unbound
        message = (
            f"internal error: after the rules ran, {function} reads {', '.join(sorted(names))}, which nothing binds "
            "there any more; the package was left unchanged"
        )
        return "error", code, [Diagnostic(path, 1, 1, codes.REGION_VIOLATION, message)], {}
    converters = find_converters(info)
    said = {d.line for d in found if d.code == codes.UNKNOWN_IDIOM}
    leftovers = leftover_diagnostics(own_info, reparsed, edited, functions, era, path, locate, converters)
    found.extend(d for d in leftovers if d.line not in said)
    found.extend(first_step_diagnostics(own_info, reparsed, era, path, locate))
    found.extend(removed_uses(module, new_module, era, path, locate, migrated))
    if found:
        return "failed", code, found, dict(matched)
    return ("migrated" if migrated != code else "clean"), migrated, notes, dict(matched)


def _takes_part(own_info: ModuleInfo, info: ModuleInfo) -> bool:
    """The module defines a class with a role in the package's model (a block that only hands the cache on has no
    legacy use, yet the rules thread the layer index through it)."""
    roles = {name for role, names in info.roles.items() if role != "consumer" for name in names}
    return bool(roles & set(own_info.classes) & {f.cls for f in own_info.functions.values()})
