"""Helpers vendored into a migrated file: module-level definitions, written for this repository, that stand in for
what a newer transformers removed (``SequenceSummary``, the ``modeling_attn_mask_utils`` helpers...) or that a
rule's code calls (a feature test shared by several rules).

They live in ``rules/vendor/<module>.py``, as ordinary Python (so they can be tested against the transformers code
they replace). A rule lists the ones its code uses as ``helpers = ["<module>:<name>"]``; when the rule applies,
each named definition, and every definition of the same vendor module it refers to, is inserted once at the top
level of the migrated file: before its first class or function, or before an earlier statement that uses one of
them. A file that already defines a name at the top level keeps its own. The vendor files are read as text: the
migrate path never imports them (they import torch).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path
from typing import Callable, Iterable

import libcst as cst

from ..edit.edits import Splice
from ..traverse import findall

VENDOR_RULE = "vendor"  # the claim name of the inserted definitions
_BUILTIN_VENDOR = Path(__file__).resolve().parents[1] / "builtin_rules" / "vendor"
if not _BUILTIN_VENDOR.is_dir():
    _BUILTIN_VENDOR = Path(__file__).resolve().parents[2] / "rules" / "vendor"


def vendor_file(module: str, rule_path: Path | None) -> Path:
    """``rules/vendor/<module>.py`` beside the rule's era directory, else the built-in one."""
    if rule_path is not None:
        own = Path(rule_path).resolve().parent.parent / "vendor" / f"{module}.py"
        if own.is_file():
            return own
    return _BUILTIN_VENDOR / f"{module}.py"


@functools.lru_cache(maxsize=None)
def _definitions(path: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """Top-level ``def``/``class``/assignment name -> (its code, the names it reads)."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, str(path))
    found: dict[str, tuple[str, frozenset[str]]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            names = [t.id for t in node.targets]
        else:
            continue
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        code = "\n".join(text.splitlines()[start - 1 : node.end_lineno]) + "\n"
        reads = frozenset(n.id for n in ast.walk(node) if isinstance(n, ast.Name))
        for name in names:
            found[name] = (code, reads)
    return found


def check_helpers(rule, check) -> None:
    """Every ``helpers`` entry of a rule names a definition of an existing vendor file (at load time)."""
    for entry in rule.helpers:
        module, _, name = entry.partition(":")
        if not module or not name:
            raise check.fail(
                "helpers", 'entries "<vendor module>:<name>", e.g. "attn_mask:AttentionMaskConverter"', entry
            )
        path = vendor_file(module, rule.path)
        if not path.is_file():
            raise check.fail("helpers", f"a module of {path.parent} (no {path.name} there)", entry)
        try:
            defined = _definitions(path)
        except SyntaxError as exc:
            raise check.fail("helpers", f"a vendor module that parses ({path}: {exc.msg})", entry) from None
        if name not in defined:
            raise check.fail(
                "helpers", f"a name {path.name} defines at its top level ({', '.join(sorted(defined))})", entry
            )


def closure(entries: Iterable[tuple[str, Path | None]]) -> list[tuple[str, str]]:
    """(name, code) of the requested definitions and those they use, each once, in the vendor files' order."""
    wanted: dict[str, tuple[Path, str]] = {}
    pending = [(entry, rule_path) for entry, rule_path in entries]
    while pending:
        entry, rule_path = pending.pop()
        module, _, name = entry.partition(":")
        path = vendor_file(module, rule_path)
        if name in wanted:
            continue
        defined = _definitions(path)
        code, reads = defined[name]
        wanted[name] = (path, code)
        pending.extend(
            (f"{module}:{other}", rule_path) for other in sorted(reads) if other in defined and other != name
        )
    ordered = []
    for path in dict.fromkeys(p for p, _ in wanted.values()):
        for name, (code, _) in _definitions(path).items():
            if wanted.get(name, (None, None))[0] == path and (name, code) not in ordered:
                ordered.append((name, code))
    return ordered


@functools.lru_cache(maxsize=None)
def _vendor_imports(path: Path) -> dict[str, str]:
    """Name bound by a top-level import of a vendor file -> the ``plan_imports`` entry that binds it in a migrated
    file: ``import X`` (or ``import X.y``) -> ``"import X"``; ``from transformers.m import N`` -> ``"m:N"`` (in the
    file's own import style, relative inside the package). Aliased imports are not followed."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname is None:
                    found[alias.name.split(".")[0]] = "import " + alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("transformers."):
            for alias in node.names:
                if alias.asname is None and alias.name != "*":
                    found[alias.name] = f"{node.module[len('transformers.'):]}:{alias.name}"
    return found


def helper_imports(module: cst.Module, entries: list[tuple[str, Path | None]]) -> list[str]:
    """The imports (``plan_imports`` entries) of what the vendored definitions to insert read, as their vendor file
    imports it (``import torch``, ``from transformers.pytorch_utils import Conv1D``), where the file does not bind
    the name at its top level: a file with only ``from torch import nn`` gets ``import torch`` for a vendored
    ``torch.nn.Module``, one that vendors ``prune_conv1d_layer`` gets ``Conv1D`` from ``pytorch_utils``."""
    if not entries:
        return []
    defined = set().union(*(_top_level_names(s) for s in module.body)) if module.body else set()
    bound = set().union(*(_bound_by(s) for s in module.body)) if module.body else set()
    chosen = {name for name, _ in closure(entries) if name not in defined}  # as plan_helpers chooses them
    needed: list[str] = []
    for path in dict.fromkeys(vendor_file(e.partition(":")[0], p) for e, p in entries):
        imports = _vendor_imports(path)
        for name, (_, reads) in _definitions(path).items():
            if name in chosen:
                for read in sorted(reads & set(imports) - bound):
                    if imports[read] not in needed:
                        needed.append(imports[read])
    return needed


def _bound_by(stmt: cst.CSTNode) -> set[str]:
    """Top-level names a statement binds: definitions, assignments and imports."""
    names = _top_level_names(stmt)
    if isinstance(stmt, cst.SimpleStatementLine):
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        names.add(alias.asname.name.value)
                    elif alias.asname is None:
                        names.add(_dotted_head(alias.name))
            elif isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                for alias in small.names:
                    bound = alias.asname.name if alias.asname is not None else alias.name
                    if isinstance(bound, cst.Name):
                        names.add(bound.value)
    return names


def _dotted_head(node: cst.BaseExpression) -> str:
    while isinstance(node, cst.Attribute):
        node = node.value
    return node.value if isinstance(node, cst.Name) else ""


def _top_level_names(stmt: cst.CSTNode) -> set[str]:
    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
        return {stmt.name.value}
    names = set()
    if isinstance(stmt, cst.SimpleStatementLine):
        for small in stmt.body:
            targets = small.targets if isinstance(small, cst.Assign) else []
            names.update(t.target.value for t in targets if isinstance(t.target, cst.Name))
    return names


def _reads(stmt: cst.CSTNode, names: set[str]) -> bool:
    import libcst.matchers as m

    return any(n.value in names for n in findall(stmt, m.Name()))


def plan_helpers(
    module: cst.Module, entries: list[tuple[str, Path | None]], format_code: Callable[[str], str]
) -> list[Splice]:
    """One splice inserting the vendored definitions the applied rules need (none the file already defines)."""
    if not entries:
        return []
    defined = set().union(*(_top_level_names(s) for s in module.body)) if module.body else set()
    chosen = [(name, code) for name, code in closure(entries) if name not in defined]
    if not chosen:
        return []
    names = {name for name, _ in chosen}
    index = next(
        (
            i
            for i, stmt in enumerate(module.body)
            if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)) or (not _is_import(stmt) and _reads(stmt, names))
        ),
        len(module.body),
    )
    code = format_code("\n\n".join(code for _, code in chosen))
    statements = list(cst.parse_module(code).body)
    two_blank = [cst.EmptyLine(indent=False), cst.EmptyLine(indent=False)]
    definition = (cst.ClassDef, cst.FunctionDef)
    before = [module.body[index - 1] if index > 0 else None, *statements[:-1]]
    statements = [  # black: two blank lines around a definition, one between other top-level statements
        s.with_changes(
            leading_lines=[*(two_blank if isinstance(s, definition) or isinstance(b, definition) else two_blank[:1]),
                           *_comments(s)]  # fmt: skip
        )
        for s, b in zip(statements, before)
    ]
    following = module.body[index] if index < len(module.body) else None
    blanks = [line for line in getattr(following, "leading_lines", ()) if line.comment is None]
    if following is None or len(blanks) >= 2:
        return [Splice(VENDOR_RULE, module, index, 0, lambda _resolve, s=statements: s, ())]

    def build(resolve, s=statements, following=following):  # two blank lines after a definition, as black has it
        after = resolve.statements([following])
        if after:
            after[0] = after[0].with_changes(leading_lines=[*two_blank, *_comments(after[0])])
        return [*s, *after]

    return [Splice(VENDOR_RULE, module, index, 1, build, ())]


def _comments(stmt: cst.CSTNode) -> list[cst.EmptyLine]:
    """The comment lines above a definition, without its blank lines."""
    return [line for line in getattr(stmt, "leading_lines", ()) if line.comment is not None]


def _is_import(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
    )
