"""What is left over after the rules ran: the edited functions and top-level definitions of a plan, names that
an edit left unbound, and the legacy uses still present (each located in the original file, one diagnostic per
statement)."""

from __future__ import annotations

from typing import Mapping

import libcst as cst

from .. import diagnostics as codes
from ..facts.analysis import Locator, ModuleInfo, analyze, module_globals
from ..facts.converters import Converter
from ..diagnostics import NO_RULE, Diagnostic
from ..edit.edits import Plan
from ..excerpts import quote, source_line
from ..facts.constructs import between_others, construct_key, explain
from .names import newly_unbound
from ..rules.schema import Era


def edited_tops(original: cst.Module, plan: Plan) -> set[str]:
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


def edited_functions(plan: Plan) -> set[str]:
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


def unbound_names(
    original: cst.Module, migrated: cst.Module, edited: set[str], functions: set[str]
) -> tuple[str, set[str]] | None:
    """The first edited function that reads a name nothing binds any more (see :mod:`cachemigrate.proof.names`)."""
    before, after = _functions_of(original, edited), _functions_of(migrated, edited)
    after = {name: node for name, node in after.items() if name in functions}
    globals_before, globals_after = module_globals(original), module_globals(migrated)
    for qualname, function in after.items():
        if qualname in before:
            names = newly_unbound(before[qualname], function, globals_before, globals_after)
            if names:
                return qualname, names
    return None


def leftover_diagnostics(
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
    are analysed again; the others keep the uses found before. ``new_module`` is a fresh parse of the migrated
    code (the applied tree can hold one node object in several places).

    The file's legacy converters (:mod:`cachemigrate.facts.converters`) only ever handle tuples and keep their tuple
    code; handing them a cache outside a tuple-only branch is a legacy use (a Cache could reach them)."""
    changed = [s for s in new_module.body if isinstance(s, (cst.ClassDef, cst.FunctionDef)) and s.name.value in edited]
    after = analyze(cst.Module(body=changed), era.cache_names, only=functions)
    reanalysed = {q for q in after.functions if q in functions}
    exempt = {c.qualname for c in converters.values()}
    calls = {f"self.{name}" for name in converters}

    consumers = set(before.roles.get("consumer", ()))

    def counts_layers(use) -> bool:  # `len(past)` outside a model: a Cache has a length too (its layers)
        return use.function in consumers and use.idiom == f"len({use.variable})"

    def leftovers(fn) -> list:
        if fn.qualname in exempt:
            return []
        return [
            u
            for u in fn.uses
            if (u.kind == "legacy" and not counts_layers(u)) or (u.kind == "pass" and u.idiom in calls)
        ]

    kept = [use for fn in before.functions.values() if fn.qualname not in reanalysed for use in leftovers(fn)]
    originals: dict[tuple, list] = {}
    for use in (u for fn in before.functions.values() for u in leftovers(fn)):
        originals.setdefault((use.function, use.statement, use.idiom), []).append(use)
    # one diagnostic per statement (a statement reading `past[0]` and `past[1]` is one construct)
    grouped: dict[tuple, list] = {}
    middle = {
        name: between_others(fn.node, fn.cache_names or set(fn.cache_params)) for name, fn in before.functions.items()
    }
    for use in [*kept, *(u for q in reanalysed for u in leftovers(after.functions[q]))]:
        matches = originals.get((use.function, use.statement, use.idiom))
        node = matches.pop(0).node if matches else None
        if node is not None:
            line, column = locate(node)
        else:
            fn = before.functions.get(use.function)
            line, column = locate(fn.node if fn else None)
        key = construct_key(before.functions.get(use.function), use, node, middle.get(use.function, set()))
        grouped.setdefault((use.function, key), []).append((line, column, use, node))
    result = []
    for (function, _), uses in grouped.items():
        line, column, first, node = min(uses, key=lambda found: found[:2])
        idioms = list(dict.fromkeys(f"`{quote(use[2].idiom)}`" for use in sorted(uses, key=lambda found: found[:2])))
        excerpt = source_line(locate.code, line)
        where = f" in `{excerpt}`" if excerpt else ""
        known = explain(
            before.functions.get(function), first, node, middle.get(function, set()), where, idioms, locate, before
        )
        if known is not None:
            result.append(Diagnostic(path, line, column, codes.UNKNOWN_IDIOM, known))
            continue
        if first.kind == "pass":
            what = (
                f"`{first.variable}` is handed to `{quote(first.idiom)}`, which converts legacy tuples only, in {function}"
                f"{where}, where a Cache can reach it,"
            )
        else:
            what = f"`{first.variable}` is used as a tuple cache in {function} ({', '.join(idioms)}{where})"
        message = f"{what} {NO_RULE}"
        result.append(Diagnostic(path, line, column, codes.UNKNOWN_IDIOM, message))
    return result
