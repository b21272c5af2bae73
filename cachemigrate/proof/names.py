"""A safety net after the rules ran: a migrated function must not read a name that nothing binds.

A rule that removes an assignment (an unpack folded into a rewritten run, say) while code that is not its own
still reads the name would give a NameError at run time, and neither the region proof (the removal was
claimed) nor the legacy audit (the name is no cache) sees it. Here the free names of each edited function are
compared before and after: a name free only after the migration is an internal error.

One visit per function collects the names it binds (parameters, assignment and loop targets, ``with``/``except``
names, walrus targets, nested definitions, imports, ``global``/``nonlocal``) and the names it reads (every other
``Name``, attribute names and keywords excepted)."""

from __future__ import annotations

import builtins

import libcst as cst

from ..traverse import walk

_BUILTINS = frozenset(dir(builtins)) | {"__class__", "__name__", "__file__"}


class _Names(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.bound: set[str] = set()
        self.read: set[str] = set()

    # binding positions ------------------------------------------------------------------------------------

    def _bind_all(self, node: cst.CSTNode | None) -> None:
        """The names a target binds: a name, or the names of a tuple/list/starred target (not ``x[i]``, ``x.a``)."""
        if isinstance(node, cst.Name):
            self.bound.add(node.value)
        elif isinstance(node, (cst.Tuple, cst.List)):
            for element in node.elements:
                self._bind_all(element.value)
        elif isinstance(node, cst.StarredElement):
            self._bind_all(node.value)

    def visit_Param(self, node: cst.Param) -> bool:
        self.bound.add(node.name.value)
        for part in (node.annotation, node.default):
            if part is not None:
                walk(part, self)
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        self._bind_all(node.target)
        self._reads_inside_target(node.target)
        return False

    def visit_AugAssign(self, node: cst.AugAssign) -> bool:
        self._bind_all(node.target)
        walk(node.target, self)  # `x += 1` reads x too
        walk(node.value, self)
        return False

    def visit_AnnAssign(self, node: cst.AnnAssign) -> bool:
        self._bind_all(node.target)
        for part in (node.annotation, node.value):
            if part is not None:
                walk(part, self)
        return False

    def visit_For(self, node: cst.For) -> None:
        self._bind_all(node.target)
        self._reads_inside_target(node.target)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._bind_all(node.target)

    def visit_AsName(self, node: cst.AsName) -> bool:
        self._bind_all(node.name)
        return False

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind_all(node.target)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.bound.add(node.name.value)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.bound.add(node.name.value)

    def _imports(self, node: cst.Import | cst.ImportFrom) -> bool:
        if isinstance(node.names, cst.ImportStar):
            return False
        for alias in node.names:
            if alias.asname is not None:
                self._bind_all(alias.asname.name)
            else:
                self.bound.add(cst.Module(body=[]).code_for_node(alias.name).split(".")[0])
        return False  # module paths and imported names are not reads

    def visit_Import(self, node: cst.Import) -> bool:
        return self._imports(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return self._imports(node)

    def visit_Global(self, node: cst.Global) -> bool:
        self.bound.update(item.name.value for item in node.names)
        return False

    def visit_Nonlocal(self, node: cst.Nonlocal) -> bool:
        self.bound.update(item.name.value for item in node.names)
        return False

    def _reads_inside_target(self, target: cst.CSTNode) -> None:
        """``x[i] = ...`` and ``x.a = ...`` read ``x`` and ``i``."""
        if isinstance(target, (cst.Subscript, cst.Attribute)):
            walk(target, self)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._reads_inside_target(element.value)

    # reading positions ------------------------------------------------------------------------------------

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        walk(node.value, self)  # the attribute name is not a variable
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        walk(node.value, self)  # nor is a keyword
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.read.add(node.value)


def free_names(function: cst.CSTNode, module_names: set[str]) -> set[str]:
    names = _Names()
    walk(function, names)
    return names.read - names.bound - module_names - _BUILTINS


def newly_unbound(
    before: cst.CSTNode, after: cst.CSTNode, module_before: set[str], module_after: set[str]
) -> set[str]:
    """Names the migrated function reads that nothing binds, and that were bound (or not read) before (the
    original is only walked when the migrated function has a free name at all)."""
    free = free_names(after, module_after)
    return free - free_names(before, module_before) if free else free
