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
import re
import sys
from typing import Callable

import libcst as cst
import libcst.matchers as m

from .edits import Splice
from ..rules.schema import Era
from ..traverse import findall

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
    head = _Head(list(module.body[:split]), format_code)
    for needed in _needed(module, era, names):
        head.place(needed)
    return head.splices(module)


class _Head:
    """The module head as the imports are placed in it: original statements (some with new leading lines or new
    names) and new statements between them."""

    def __init__(self, body: list[cst.CSTNode], format_code: Callable[[str], str]) -> None:
        self.original = list(body)
        self.body = list(body)
        self.format_code = format_code
        self.origin: dict[int, cst.CSTNode] = {}  # id of a changed statement -> the original it stands for
        self.separate: dict[int, cst.CSTNode] = {}  # id of a statement with merged names -> them on their own

    def replace(self, index: int, new: cst.CSTNode, separate: cst.CSTNode | None = None) -> None:
        old = self.body[index]
        self.origin[id(new)] = self.origin.get(id(old), old)
        if separate is not None or id(old) in self.separate:
            self.separate[id(new)] = separate or self.separate[id(old)]
        self.body[index] = new

    def place(self, needed: _Needed) -> None:
        _place(self, needed)

    def splices(self, module: cst.Module) -> list[Splice]:
        """One splice per original statement that changed or gets new statements before it (and one at the end).
        A changed statement is rebuilt from what the other rules made of it: one they edited too (an import a
        rule drops) keeps their edit, with the new leading lines, and merged names go on a statement of their
        own."""
        edits: list[Splice] = []
        pending: list[cst.CSTNode] = []
        position = 0
        for node in self.body:
            original = self.origin.get(id(node), node)
            if position < len(self.original) and original is self.original[position]:
                changed = node is not original
                if changed or pending:
                    build = _rebuilt(original, node, self.separate.get(id(node))) if changed else None
                    before = self.original[position - 1] if position else None
                    edits.append(_splice(module, position, pending, original if changed else None, build, before))
                pending = []
                position += 1
            else:
                pending.append(node)
        if pending:
            before = self.original[position - 1] if position else None
            edits.append(_splice(module, position, pending, None, None, before))
        return edits


def _splice(module, index, inserted, original, build, before=None) -> Splice:
    statements = list(inserted)

    def new(resolve) -> list[cst.CSTNode]:
        return _heading(statements, before, resolve)

    if original is None:
        return Splice(IMPORTS_RULE, module, index, 0, new, ())
    return Splice(IMPORTS_RULE, module, index, 1, lambda r: [*new(r), *build(r)], ())


def _heading(statements: list[cst.CSTNode], before: cst.CSTNode | None, resolve) -> list[cst.CSTNode]:
    """The new statements, the first taking the blank lines of the import right before them when another rule
    removed that one (a ``drop_import`` of a whole statement that began a group): the group keeps its
    separation."""
    if not statements or before is None or not _is_import_line(before) or resolve.statements([before]):
        return statements
    blanks = [line for line in before.leading_lines if line.comment is None]
    if not blanks or any(line.comment is None for line in statements[0].leading_lines):
        return statements
    first = statements[0].with_changes(leading_lines=[*blanks, *statements[0].leading_lines])
    return [first, *statements[1:]]


def _is_import_line(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body
    )


def _rebuilt(original: cst.CSTNode, node: cst.CSTNode, separate: cst.CSTNode | None):
    def build(resolve) -> list[cst.CSTNode]:
        now = resolve.statements([original])
        if len(now) == 1 and now[0].deep_equals(original):  # no other rule touched it
            return [node]
        if now:
            now[0] = now[0].with_changes(leading_lines=node.leading_lines)
        elif separate is None:  # removed by another rule: what follows keeps the place's blank lines
            return []
        return [*now, *([separate.with_changes(leading_lines=[] if now else node.leading_lines)] if separate else [])]

    return build


def _needed(module: cst.Module, era: Era, names: list[str]) -> list[_Needed]:
    """The statements to have, one per source module, leaving out names the file already imports."""
    relative = 0
    for node in findall(module, m.ImportFrom(module=m.Name("modeling_utils"))):
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


def _place(head: _Head, needed: _Needed) -> None:
    """``needed`` merged into the head's statement of its module, or inserted at isort's place."""
    body = head.body
    if needed.names:
        for index, stmt in enumerate(body):
            merged = _merged(stmt, needed, head.format_code)
            if merged is not None:
                if merged is not stmt:
                    head.replace(index, merged, cst.parse_statement(head.format_code(needed.code)))
                return
    statement = cst.parse_statement(head.format_code(needed.code))
    new = _describe_needed(needed)
    described = {i: d for i, d in ((i, _described(s)) for i, s in enumerate(body)) if d is not None}
    groups = _groups(body, described)
    if not groups:  # no import at all: after the docstring and the `__future__` imports
        at = _after_preamble(body)
        _insert(head, at, statement, blank=at > 0)
        return
    group = _group_with(groups, described, lambda d: bool(new.package) and d.package == new.package)
    group = group or _group_with(groups, described, lambda d: d.section == new.section)
    if group is None:  # a section the file does not have: a group of its own, after the sections before it
        sections = [min(described[i].section for i in g) for g in groups]
        before = [g for g, section in zip(groups, sections) if section < new.section]
        if not before:
            _insert(head, groups[0][0], statement, blank=True, starts_group=True)
        else:
            _insert(head, before[-1][-1] + 1, statement, blank=True)
        return
    keys = [described[i].key for i in group]
    if keys == sorted(keys):
        at = next((i for i in group if described[i].key > new.key), group[-1] + 1)
    else:  # the user's own order: after the last one of the same style
        same = [i for i in group if described[i].straight == new.straight]
        at = (same or group)[-1] + 1
    _insert(head, at, statement, starts_group=at == group[0])


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


def _insert(head: _Head, at: int, statement: cst.CSTNode, blank: bool = False, starts_group: bool = False) -> None:
    """``statement`` inserted before ``head.body[at]``. ``starts_group``: it becomes the first of that statement's
    group, so it takes the blank lines above it (and, with ``blank``, a blank line stays between them: a new
    group); otherwise ``blank`` puts one blank line above it."""
    lines: list[cst.EmptyLine] = [cst.EmptyLine()] if blank else []
    if starts_group and at < len(head.body):
        above = list(head.body[at].leading_lines)
        blanks = 0
        while blanks < len(above) and above[blanks].comment is None:
            blanks += 1
        lines = above[:blanks]
        rest = ([cst.EmptyLine()] if blank else []) + above[blanks:]
        if rest != above:
            head.replace(at, head.body[at].with_changes(leading_lines=rest))
    head.body.insert(at, statement.with_changes(leading_lines=lines))


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
