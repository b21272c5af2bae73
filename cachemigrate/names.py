"""A safety net after the rules ran: a migrated function must not read a name that nothing binds.

A rule that removes an assignment (an unpack folded into a rewritten run, say) while code that is not its own
still reads the name would give a NameError at run time, and neither the region proof (the removal was
claimed) nor the legacy audit (the name is no cache) sees it. Here the free names of each edited function are
compared before and after: a name free only after the migration is an internal error."""

from __future__ import annotations

import builtins

import libcst as cst
import libcst.matchers as m

_BUILTINS = frozenset(dir(builtins)) | {"__class__", "__name__", "__file__"}


def _bound(node: cst.CSTNode) -> set[str]:
    names: set[str] = set()
    for param in m.findall(node, m.Param()):
        names.add(param.name.value)
    for target in m.findall(node, m.AssignTarget() | m.AnnAssign() | m.AugAssign() | m.For() | m.CompFor()):
        holder = target.target
        names.update(n.value for n in m.findall(holder, m.Name()))
    for item in m.findall(node, m.WithItem() | m.ExceptHandler() | m.NamedExpr()):
        holder = getattr(item, "asname", None) or getattr(item, "name", None) or getattr(item, "target", None)
        if holder is not None:
            names.update(n.value for n in m.findall(holder, m.Name()))
    for definition in m.findall(node, m.FunctionDef() | m.ClassDef()):
        names.add(definition.name.value)
    for alias in m.findall(node, m.ImportAlias()):
        bound = alias.asname.name if alias.asname else alias.name
        names.add(cst.Module(body=[]).code_for_node(bound).split(".")[0])
    for statement in m.findall(node, m.Global() | m.Nonlocal()):
        names.update(item.name.value for item in statement.names)
    return names


def _read(node: cst.CSTNode) -> set[str]:
    """Names read in ``node``: every Name but attribute names and keyword names."""
    skip = {a.attr for a in m.findall(node, m.Attribute())}
    skip |= {a.keyword for a in m.findall(node, m.Arg()) if a.keyword is not None}
    return {n.value for n in m.findall(node, m.Name()) if n not in skip}


def free_names(function: cst.CSTNode, module_names: set[str]) -> set[str]:
    return _read(function) - _bound(function) - module_names - _BUILTINS


def newly_unbound(
    before: cst.CSTNode, after: cst.CSTNode, module_before: set[str], module_after: set[str]
) -> set[str]:
    """Names the migrated function reads that nothing binds, and that were bound (or not read) before."""
    return free_names(after, module_after) - free_names(before, module_before)
