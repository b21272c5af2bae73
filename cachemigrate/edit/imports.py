"""The imports the applied rules need, planned as edits of the module head through libcst's
``AddImportsVisitor``."""

from __future__ import annotations

import difflib
import sys

import libcst as cst
import libcst.matchers as m
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from .edits import Splice
from ..rules.schema import Era

IMPORTS_RULE = "imports"  # the claim name of the import edits


def plan_imports(module: cst.Module, era: Era, names: list[str]) -> list[Splice]:
    """Edits that add ``names`` to the imports at the top of ``module``.

    An entry is ``Name`` (from the era's cache module), ``module.path:Name`` (a module of transformers, e.g.
    ``utils.deprecation:deprecate_kwarg``), ``stdlib_module:Name`` (``typing:Optional``) or ``import module``
    (``import torch``, kept once). transformers modules
    are imported in the style of the file's own: relative (``from ...cache_utils``) inside the transformers
    package, absolute elsewhere. ``AddImportsVisitor`` rewrites a copy of the module head; the statements it
    changed or added are found by comparing their code with the original head's, and become splices."""
    if not names:
        return []
    relative = 0
    for node in m.findall(module, m.ImportFrom(module=m.Name("modeling_utils"))):
        if node.relative:
            relative = len(node.relative)
            break
    context = CodemodContext()
    present = _imported_names(module)
    for entry in names:
        if entry.startswith("import "):  # a plain `import torch` (what vendored helpers read)
            AddImportsVisitor.add_needed_import(context, entry[len("import ") :])
            continue
        source, _, name = entry.rpartition(":")
        source = source or era.cache_module
        if (source, name) in present:  # AddImportsVisitor does not see relative imports it would duplicate
            continue
        if source.split(".")[0] in sys.stdlib_module_names:
            AddImportsVisitor.add_needed_import(context, source, name)
        elif relative:
            AddImportsVisitor.add_needed_import(context, source, name, relative=relative)
        else:
            AddImportsVisitor.add_needed_import(context, f"transformers.{source}", name)
    if not context.scratch.get(AddImportsVisitor.CONTEXT_KEY):
        return []
    split = next(
        (i for i, stmt in enumerate(module.body) if isinstance(stmt, (cst.ClassDef, cst.FunctionDef))),
        len(module.body),
    )
    head = module.with_changes(body=module.body[:split])
    new_head = AddImportsVisitor(context).transform_module(head)
    old = [module.code_for_node(s) for s in head.body]
    new = [module.code_for_node(s) for s in new_head.body]
    edits: list[Splice] = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        statements = list(new_head.body[j1:j2])
        edits.append(Splice(IMPORTS_RULE, module, i1, i2 - i1, lambda _r, s=statements: s, ()))
    return edits


def _dotted(node) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


def _imported_names(module: cst.Module) -> set[tuple[str, str]]:
    """(module, name) of every top-level ``from X import name`` of the file; transformers modules (relative, or
    absolute ``transformers.X``) by their path inside the package."""
    found = set()
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for node in stmt.body:
            if not isinstance(node, cst.ImportFrom) or isinstance(node.names, cst.ImportStar):
                continue
            source = _dotted(node.module) if node.module is not None else ""
            if not node.relative and source.startswith("transformers."):
                source = source[len("transformers.") :]
            for alias in node.names:
                if alias.asname is None and isinstance(alias.name, cst.Name):
                    found.add((source, alias.name.value))
    return found
