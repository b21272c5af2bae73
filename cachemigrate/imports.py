"""The imports the applied rules need, placed where isort (and ruff's ``I`` rules, profile black) would put them.

The file's own import block decides: its groups (runs of imports separated by blank lines) are its sections. A
name from a module the file already imports from joins that statement; a new statement goes into the group of its
section (the group that imports the same package, else the one of its kind: ``__future__``, standard library,
third party, relative) at its sorted place, straight ``import x`` before ``from x import y`` as isort orders them.
A group that is not sorted is never reordered: the new statement goes after its last one of the same style. A
section the file does not have yet becomes a group of its own, between its neighbours in isort's order. Only the
new or extended statements change, so the region proof (:mod:`cachemigrate.audit`) sees the inserted lines
alone."""

from __future__ import annotations

import dataclasses
import difflib
import re
import sys
from typing import Callable

import libcst as cst
import libcst.matchers as m

from .edits import Splice
from .schema import Era

IMPORTS_RULE = "imports"  # the claim name of the import edits

FUTURE, STDLIB, THIRD_PARTY, RELATIVE = 0, 1, 2, 4  # isort's order of sections (first party, 3, is the file's)


@dataclasses.dataclass(frozen=True)
class _Needed:
    """One import statement to have: ``from <dots><module> import names`` or ``import module`` (no names)."""

    relative: int
    module: str
    names: tuple[str, ...] = ()

    @property
    def code(self) -> str:
        if not self.names:
            return f"import {self.module}"
        return f"from {'.' * self.relative}{self.module} import {', '.join(sorted(self.names, key=name_key))}"


def plan_imports(
    module: cst.Module, era: Era, names: list[str], format_code: Callable[[str], str] = lambda code: code
) -> list[Splice]:
    """Edits that add ``names`` to the imports at the top of ``module``.

    An entry is ``Name`` (from the era's cache module), ``module.path:Name`` (a module of transformers, e.g.
    ``utils.deprecation:deprecate_kwarg``), ``stdlib_module:Name`` (``typing:Optional``) or ``import module``
    (``import torch``, kept once). transformers modules are imported in the style of the file's own: relative
    (``from ...cache_utils``) inside the transformers package, absolute elsewhere. ``format_code`` wraps a
    statement that does not fit the file's width (black)."""
    split = next(
        (i for i, stmt in enumerate(module.body) if isinstance(stmt, (cst.ClassDef, cst.FunctionDef))),
        len(module.body),
    )
    old = list(module.body[:split])
    new = list(old)
    for needed in _needed(module, era, names):
        new = _placed(new, needed, format_code)
    if new == old:
        return []
    old_code = [module.code_for_node(s) for s in old]
    new_code = [module.code_for_node(s) for s in new]
    edits: list[Splice] = []
    matcher = difflib.SequenceMatcher(None, old_code, new_code, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            statements = new[j1:j2]
            edits.append(Splice(IMPORTS_RULE, module, i1, i2 - i1, lambda _r, s=statements: s, ()))
    return edits


def _needed(module: cst.Module, era: Era, names: list[str]) -> list[_Needed]:
    """The statements to have, one per source module, leaving out names the file already imports."""
    relative = 0
    for node in m.findall(module, m.ImportFrom(module=m.Name("modeling_utils"))):
        if node.relative:
            relative = len(node.relative)
            break
    present = _imported_names(module)
    bound = _plainly_imported(module)
    wanted: dict[tuple[int, str], list[str]] = {}
    for entry in names:
        if entry.startswith("import "):  # a plain `import torch` (what vendored helpers read)
            target = entry[len("import ") :]
            if target not in bound:
                wanted.setdefault((0, target), [])
            continue
        source, _, name = entry.rpartition(":")
        source = source or era.cache_module
        if (source, name) in present:
            continue
        if source.split(".")[0] in sys.stdlib_module_names:
            key = (0, source)
        elif relative:
            key = (relative, source)
        else:
            key = (0, f"transformers.{source}")
        if name not in wanted.setdefault(key, []):
            wanted[key].append(name)
    return [_Needed(level, source, tuple(found)) for (level, source), found in wanted.items()]


# -- isort's keys -------------------------------------------------------------------------------------------------


def _natural(text: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text.lower()))


def name_key(name: str) -> tuple:
    """isort's order of the names of one ``from`` import (ruff's ``order-by-type``): CONSTANTS, Classes, others."""
    kind = 0 if name.isupper() and len(name) > 1 else 1 if name[:1].isupper() else 2
    return kind, _natural(name)


@dataclasses.dataclass(frozen=True)
class _Import:
    """What isort reads of one import statement."""

    section: int
    package: str  # the top-level package of an absolute import ("" for a relative one)
    key: tuple  # its place within its section

    @property
    def straight(self) -> bool:
        return self.key[0] == 0


def _described(stmt: cst.CSTNode) -> _Import | None:
    """isort's view of a top-level statement that is one import (None for anything else)."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    node = stmt.body[0]
    if isinstance(node, cst.Import):
        dotted = _dotted(node.names[0].name)
        return _Import(_section(0, dotted), dotted.split(".")[0], (0, 0, _natural(dotted)))
    if isinstance(node, cst.ImportFrom):
        dotted = _dotted(node.module) if node.module is not None else ""
        level = len(node.relative)
        package = "" if level else dotted.split(".")[0]
        return _Import(_section(level, dotted), package, (1, -level, _natural(dotted)))  # furthest-to-closest
    return None


def _section(level: int, dotted: str) -> int:
    top = dotted.split(".")[0]
    if level:
        return RELATIVE
    if top == "__future__":
        return FUTURE
    return STDLIB if top in sys.stdlib_module_names else THIRD_PARTY


def _describe_needed(needed: _Needed) -> _Import:
    if not needed.names:
        return _Import(_section(0, needed.module), needed.module.split(".")[0], (0, 0, _natural(needed.module)))
    package = "" if needed.relative else needed.module.split(".")[0]
    key = (1, -needed.relative, _natural(needed.module))
    return _Import(_section(needed.relative, needed.module), package, key)


# -- placing one statement ----------------------------------------------------------------------------------------


def _placed(body: list[cst.CSTNode], needed: _Needed, format_code: Callable[[str], str]) -> list[cst.CSTNode]:
    """``body`` (the module head) with ``needed`` merged into its statement or inserted at isort's place."""
    if needed.names:
        for index, stmt in enumerate(body):
            merged = _merged(stmt, needed, format_code)
            if merged is not None:
                return [*body[:index], merged, *body[index + 1 :]]
    statement = cst.parse_statement(format_code(needed.code))
    new = _describe_needed(needed)
    described = {i: d for i, d in ((i, _described(s)) for i, s in enumerate(body)) if d is not None}
    groups = _groups(body, described)
    if not groups:  # no import at all: after the docstring and the `__future__` imports
        at = _after_preamble(body)
        return _inserted(body, at, statement, blank=at > 0)
    group = _group_with(groups, described, lambda d: bool(new.package) and d.package == new.package)
    group = group or _group_with(groups, described, lambda d: d.section == new.section)
    if group is None:  # a section the file does not have: a group of its own, after the sections before it
        sections = [min(described[i].section for i in g) for g in groups]
        before = [g for g, section in zip(groups, sections) if section < new.section]
        if not before:
            return _inserted(body, groups[0][0], statement, blank=True, starts_group=True)
        return _inserted(body, before[-1][-1] + 1, statement, blank=True)
    keys = [described[i].key for i in group]
    if keys == sorted(keys):
        at = next((i for i in group if described[i].key > new.key), group[-1] + 1)
    else:  # the user's own order: after the last one of the same style
        same = [i for i in group if described[i].straight == new.straight]
        at = (same or group)[-1] + 1
    return _inserted(body, at, statement, starts_group=at == group[0])


def _groups(body: list[cst.CSTNode], described: dict) -> list[list[int]]:
    """Runs of one-import statements, split where a blank line separates them (isort's sections)."""
    groups: list[list[int]] = []
    for index in sorted(described):
        blank = any(line.comment is None for line in body[index].leading_lines)
        if groups and groups[-1][-1] == index - 1 and not blank:
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups


def _group_with(groups: list[list[int]], described: dict, test: Callable[[_Import], bool]) -> list[int] | None:
    return next((group for group in groups if any(test(described[i]) for i in group)), None)


def _after_preamble(body: list[cst.CSTNode]) -> int:
    """The index after a module docstring and ``from __future__`` imports."""
    at = 0
    if body and m.matches(body[0], m.SimpleStatementLine(body=[m.Expr(m.SimpleString() | m.ConcatenatedString())])):
        at = 1
    while at < len(body) and m.matches(
        body[at], m.SimpleStatementLine(body=[m.ImportFrom(module=m.Name("__future__"))])
    ):
        at += 1
    return at


def _inserted(
    body: list[cst.CSTNode], at: int, statement: cst.CSTNode, blank: bool = False, starts_group: bool = False
) -> list[cst.CSTNode]:
    """``statement`` inserted before ``body[at]``. ``starts_group``: it becomes the first of that statement's group,
    so it takes the blank lines above it (and, with ``blank``, a blank line stays between them: a new group);
    otherwise ``blank`` puts one blank line above it."""
    after = list(body[at:])
    lines: list[cst.EmptyLine] = [cst.EmptyLine()] if blank else []
    if starts_group and after:
        above = list(after[0].leading_lines)
        blanks = 0
        while blanks < len(above) and above[blanks].comment is None:
            blanks += 1
        lines = above[:blanks]
        rest = ([cst.EmptyLine()] if blank else []) + above[blanks:]
        after[0] = after[0].with_changes(leading_lines=rest)
    return [*body[:at], statement.with_changes(leading_lines=lines), *after]


def _merged(stmt: cst.CSTNode, needed: _Needed, format_code: Callable[[str], str]) -> cst.CSTNode | None:
    """``stmt`` with ``needed``'s names added, if it is ``from`` the same module (None otherwise). The names go to
    their sorted place when the statement's are sorted, else after them; a statement with a comment inside is not
    rewritten (the new names get a statement of their own)."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    node = stmt.body[0]
    if not isinstance(node, cst.ImportFrom) or isinstance(node.names, cst.ImportStar):
        return None
    dotted = _dotted(node.module) if node.module is not None else ""
    if len(node.relative) != needed.relative or dotted != needed.module:
        return None
    code = cst.Module(body=[stmt.with_changes(leading_lines=[])]).code
    if "#" in code or any(alias.asname is not None for alias in node.names):
        return None
    names = [alias.name.value for alias in node.names if isinstance(alias.name, cst.Name)]
    if len(names) != len(node.names):
        return None
    added = [name for name in needed.names if name not in names]
    if not added:
        return stmt
    if [name_key(n) for n in names] == sorted(name_key(n) for n in names):
        names = sorted([*names, *added], key=name_key)
    else:
        names = [*names, *added]
    magic = node.lpar is not None and isinstance(node.names[-1].comma, cst.Comma)  # black keeps it exploded
    joined = ", ".join(names)
    text = f"from {'.' * needed.relative}{dotted} import " + (f"({joined},)" if magic else joined)
    rebuilt = cst.parse_statement(format_code(text))
    return rebuilt.with_changes(leading_lines=stmt.leading_lines, trailing_whitespace=stmt.trailing_whitespace)


def _dotted(node) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


def _plainly_imported(module: cst.Module) -> set[str]:
    """Modules of the file's top-level ``import X`` statements (no alias)."""
    found = set()
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for node in stmt.body:
                if isinstance(node, cst.Import):
                    found.update(_dotted(a.name) for a in node.names if a.asname is None)
    return found


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
