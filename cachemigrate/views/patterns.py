"""Code templates with ``{placeholders}``: compile them to libcst matchers, match, and fill them in.

A rule writes the idiom it looks for as ordinary Python with holes, for example
``{cache}[0][0].size(-2)``. The template is parsed once and turned into a tree of
``libcst.matchers`` objects in which every hole is a ``SaveMatchedNode(DoNotCare())``.
Whitespace, parentheses and commas are not part of the match, so ``(a, b)`` and
``( a,b )`` are the same idiom. A hole used twice must capture equal code.

Holes named after a *fact* of the role being rewritten (``cache``, ``layers``, ...) are bound:
they only match that exact name or expression. A hole of the function's own facts that the function lacks
(``bound[UNBOUND]``: ``{cache}`` in a function that takes no cache) matches nothing.

In a template that is filled (a replacement, an inserted block), ``{name|filter}`` is the hole's value passed
through a filter the engine provides with the bound values (``values["|filter"]``, a function from expression to
expression), e.g. ``{key|key_to_cache}`` (:mod:`cachemigrate.facts.conversions`). A filled statement that a filter made
``x = x`` is dropped: the filter had nothing to convert.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Iterable, Mapping, Sequence

import libcst as cst
import libcst.matchers as m

from ..traverse import findall

_HOLE = re.compile(r"\{(\w+)(?:\|(\w+))?\}")
_PREFIX = "__cm_"
_SUFFIX = "__"
_FILTER = "__F_"  # {name|filter} -> __cm_name__F_filter__
UNBOUND = "!unbound"  # in the bound values: the holes of facts the function lacks, which match nothing

# Fields that carry layout only (whitespace, brackets, separators); ignored when matching.
_LAYOUT_TYPES = (
    cst.BaseParenthesizableWhitespace,
    cst.Comma,
    cst.Semicolon,
    cst.AssignEqual,
    cst.Colon,
    cst.Dot,
    cst.LeftParen,
    cst.RightParen,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
    cst.TrailingWhitespace,
    cst.EmptyLine,
    cst.Newline,
    cst.ImportStar,
)
_LAYOUT_FIELDS = {"header", "footer", "indent", "leading_lines", "lines_after_decorators", "lpar", "rpar"}


class TemplateError(ValueError):
    """A template is not valid Python once its holes are filled with names."""


def hole_name(name: str, filter: str | None = None) -> str:
    return f"{_PREFIX}{name}{_FILTER}{filter}{_SUFFIX}" if filter else f"{_PREFIX}{name}{_SUFFIX}"


def _split(hole: str) -> tuple[str, str | None]:
    """``name`` and its filter (or None) of a hole's inner identifier."""
    name, _, filter = hole.partition(_FILTER)
    return name, filter or None


def _hole_of(identifier: str) -> str | None:
    if identifier.startswith(_PREFIX) and identifier.endswith(_SUFFIX) and len(identifier) > len(_PREFIX) + 2:
        return identifier[len(_PREFIX) : -len(_SUFFIX)]
    return None


def to_python(template: str) -> str:
    """Replace every ``{hole}`` with a plain identifier so that the template parses."""
    return _HOLE.sub(lambda mo: hole_name(mo.group(1), mo.group(2)), template)


def holes(template: str) -> set[str]:
    """The names of the template's holes (filters aside)."""
    return {mo.group(1) for mo in _HOLE.finditer(template)}


def filters_in(template: str) -> set[str]:
    """The filters the template's holes use."""
    return {mo.group(2) for mo in _HOLE.finditer(template) if mo.group(2)}


def parse_expression(template: str) -> cst.BaseExpression:
    try:
        return cst.parse_expression(to_python(template.strip()))
    except cst.ParserSyntaxError as exc:
        raise TemplateError(f"not a Python expression: {template.strip()!r} ({exc.message})") from None


def parse_statements(template: str) -> list[cst.BaseStatement]:
    import textwrap

    try:
        module = cst.parse_module(to_python(textwrap.dedent(template).strip() + "\n"))
    except cst.ParserSyntaxError as exc:
        raise TemplateError(f"not Python statements: {template.strip()!r} ({exc.message})") from None
    return list(module.body)


# --------------------------------------------------------------------------------------------------------------
# Compiling a parsed template into a matcher
# --------------------------------------------------------------------------------------------------------------


def _body_hole(block: cst.IndentedBlock) -> str | None:
    if len(block.body) != 1 or not m.matches(block.body[0], m.SimpleStatementLine(body=[m.Expr(m.Name())])):
        return None
    return _hole_of(block.body[0].body[0].value.value)


class _Compiler:
    def __init__(self) -> None:
        self.uses: dict[str, int] = {}

    def capture(self, name: str) -> m.BaseMatcherNode:
        index = self.uses.get(name, 0)
        self.uses[name] = index + 1
        return m.SaveMatchedNode(m.DoNotCare(), f"{name}#{index}")

    def compile(self, node: object) -> object:
        if isinstance(node, cst.Name) and _hole_of(node.value):
            return self.capture(_hole_of(node.value))
        if isinstance(node, cst.Expr) and isinstance(node.value, cst.Name) and _hole_of(node.value.value):
            # a hole standing alone as a statement matches any single small statement
            return self.capture(_hole_of(node.value.value))
        if isinstance(node, cst.IndentedBlock) and _body_hole(node) is not None:
            # a block whose only statement is a hole matches any block: ``for ...:\n    {body}``
            index = self.uses.get(_body_hole(node), 0)
            self.uses[_body_hole(node)] = index + 1
            return m.IndentedBlock(body=m.SaveMatchedNode([m.ZeroOrMore()], f"{_body_hole(node)}#{index}"))
        if isinstance(node, cst.CSTNode):
            matcher_cls = getattr(m, type(node).__name__)
            kwargs = {}
            for field in dataclasses.fields(node):
                if field.name in _LAYOUT_FIELDS or field.name.startswith("whitespace"):
                    continue
                value = getattr(node, field.name)
                if isinstance(value, _LAYOUT_TYPES) or isinstance(value, cst.MaybeSentinel):
                    continue
                kwargs[field.name] = self.compile(value)
            return matcher_cls(**kwargs)
        if isinstance(node, (list, tuple)):
            return [self.compile(item) for item in node]
        return node  # str, None, bool: literal values


@dataclasses.dataclass(frozen=True)
class Pattern:
    """One compiled template. ``kind`` is "expression" or "statements"."""

    source: str
    kind: str
    matchers: tuple
    hole_uses: Mapping[str, int]

    def holes(self) -> set[str]:
        return {_split(name)[0] for name in self.hole_uses}


def _template_caches() -> set[str]:
    return {hole_name("cache")}


@functools.lru_cache(maxsize=1024)  # a Pattern is immutable: rules compile their templates once per process
def compile_expression(template: str) -> Pattern:
    """A matcher for the normalised view of an expression template (see :mod:`cachemigrate.views.normalize`)."""
    from .normalize import normalize_template_expression

    compiler = _Compiler()
    matcher = compiler.compile(normalize_template_expression(parse_expression(template), _template_caches()))
    return Pattern(template, "expression", (matcher,), dict(compiler.uses))


@functools.lru_cache(maxsize=1024)
def compile_statements(template: str) -> Pattern:
    """A matcher for the normalised view of statement templates: one matcher per statement of the view."""
    from .normalize import normalize_template

    compiler = _Compiler()
    statements = normalize_template(parse_statements(template), _template_caches())
    matchers = tuple(compiler.compile(stmt) for stmt in statements)
    return Pattern(template, "statements", matchers, dict(compiler.uses))


# --------------------------------------------------------------------------------------------------------------
# Matching
# --------------------------------------------------------------------------------------------------------------


def _same_code(a: object, b: object) -> bool:
    """The two captures are the same code, layout (whitespace, comments, parentheses) aside."""
    if isinstance(a, tuple) or isinstance(b, tuple):
        return isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) and all(map(_same_code, a, b))
    if code_of(a) == code_of(b):
        return True
    return isinstance(a, cst.CSTNode) and isinstance(b, cst.CSTNode) and m.matches(b, _Compiler().compile(a))


def _is_bound_value(node: object, value: str) -> bool:
    """The capture is the bound value (a name or expression such as ``self.h``), layout aside."""
    if code_of(node) == value:
        return True
    try:
        expected = cst.parse_expression(value)
    except cst.ParserSyntaxError:
        return False
    return _same_code(expected, node)


def code_of(node: cst.CSTNode) -> str:
    """Source of a node with layout normalised away (for comparing captures and keying diagnostics)."""
    if isinstance(node, cst.BaseStatement):
        text = cst.Module(body=[node]).code
    elif isinstance(node, cst.BaseSmallStatement):
        text = cst.Module(body=[cst.SimpleStatementLine(body=[node])]).code
    else:
        text = cst.Module(body=[]).code_for_node(node)
    return " ".join(text.split())


def _merge(pattern: Pattern, raw: Mapping[str, object], bound: Mapping[str, str]) -> dict[str, cst.CSTNode] | None:
    """Turn ``name#i`` captures into ``name`` captures, checking repeats agree and bound holes match facts."""
    captures: dict[str, cst.CSTNode] = {}
    unbound = bound.get(UNBOUND, ())
    for name, count in pattern.hole_uses.items():
        if name in unbound:
            return None
        first = raw[f"{name}#0"]
        for index in range(1, count):
            if not _same_code(first, raw[f"{name}#{index}"]):
                return None
        if name in bound and not _is_bound_value(first, bound[name]):
            return None
        name, predicate = _split(name)
        if predicate is not None:  # `{conv|converter}` in a pattern: the capture must pass the engine's test
            test = bound.get(f"?{predicate}")
            if test is None or not test(first):
                return None
        captures[name] = first
    return captures


def match_expression(pattern: Pattern, node: cst.CSTNode, bound: Mapping[str, str]) -> dict | None:
    raw = m.extract(node, pattern.matchers[0])
    if raw is None:
        return None
    return _merge(pattern, raw, bound)


def match_statements(
    pattern: Pattern, body: Sequence[cst.BaseStatement], start: int, bound: Mapping[str, str]
) -> dict | None:
    """Match the pattern's statements against ``body[start:start+n]``; a statement of one small statement
    in the pattern matches a SimpleStatementLine holding exactly that statement."""
    n = len(pattern.matchers)
    if start + n > len(body):
        return None
    raw: dict = {}
    for matcher, stmt in zip(pattern.matchers, body[start : start + n]):
        got = m.extract(stmt, matcher)
        if got is None:
            return None
        raw.update(got)
    return _merge(pattern, raw, bound)


# --------------------------------------------------------------------------------------------------------------
# Filling templates
# --------------------------------------------------------------------------------------------------------------


class _Filler(cst.CSTTransformer):
    def __init__(self, values: Mapping[str, cst.CSTNode]) -> None:
        self.values = values

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        # a hole standing alone as a statement and holding statements is replaced whole on leave, not name by name
        hole = _statement_hole(node)
        return hole is None or isinstance(self.values.get(hole), cst.BaseExpression)

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.BaseExpression:
        hole = _hole_of(original_node.value)
        if hole is None:
            return updated_node
        name, filter = _split(hole)
        value = self.values[name]
        if filter is not None:
            if not isinstance(value, cst.BaseExpression):
                raise TemplateError(f"hole {{{name}|{filter}}} is not an expression and cannot be converted")
            return self.values[f"|{filter}"](value)
        if isinstance(value, cst.BaseExpression):
            return value
        if isinstance(value, tuple):
            return updated_node  # a block body: spliced by leave_IndentedBlock
        raise TemplateError(f"hole {{{name}}} holds a statement and cannot be used inside an expression")

    def leave_Attribute(self, original_node, updated_node):
        return updated_node.with_changes(value=_atomic(updated_node.value))

    def leave_Subscript(self, original_node, updated_node):
        return updated_node.with_changes(value=_atomic(updated_node.value))

    def leave_Call(self, original_node, updated_node):
        return updated_node.with_changes(func=_atomic(updated_node.func))

    def leave_Module(self, original_node, updated_node):
        return self.leave_IndentedBlock(original_node, updated_node)

    def leave_IndentedBlock(self, original_node, updated_node):
        # a statement that is a hole holding a captured block body is spliced in place
        body: list = []
        for stmt in updated_node.body:
            hole = _statement_hole(stmt)
            captured = self.values.get(hole) if hole else None
            if isinstance(captured, tuple):
                body.extend(captured)
            else:
                body.append(stmt)
        return updated_node.with_changes(body=body)

    def leave_SimpleStatementLine(self, original_node, updated_node):
        if _filtered(original_node) and _self_assignment(updated_node):
            return cst.RemoveFromParent()  # `x = {x|filter}` where the filter had nothing to convert
        # a hole standing alone as a statement is replaced by the captured statement
        if len(original_node.body) == 1 and isinstance(original_node.body[0], cst.Expr):
            value = original_node.body[0].value
            if isinstance(value, cst.Name) and _hole_of(value.value):
                captured = self.values[_hole_of(value.value)]
                if isinstance(captured, tuple):
                    return updated_node  # spliced by leave_IndentedBlock
                if isinstance(captured, cst.BaseSmallStatement):
                    return updated_node.with_changes(body=[captured])
                if isinstance(captured, cst.BaseStatement):
                    return captured
        return updated_node


_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.SimpleString, cst.List, cst.Dict)


def _atomic(node: cst.BaseExpression) -> cst.BaseExpression:
    """A filled-in expression where an atom is needed (``{x}.update``, ``{x}[0]``, ``{f}(...)``): parenthesised
    unless it is one (``a + b`` would otherwise read ``a + b.update``)."""
    if isinstance(node, _ATOMS) or node.lpar:
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _filtered(stmt: cst.CSTNode) -> bool:
    return any(_split(_hole_of(n.value) or "")[1] for n in findall(stmt, m.Name()))


def _self_assignment(stmt: cst.CSTNode) -> bool:
    """``x = x``: one name assigned to itself."""
    if not m.matches(stmt, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name())], value=m.Name())])):
        return False
    assign = stmt.body[0]
    return assign.targets[0].target.value == assign.value.value


def _statement_hole(stmt: cst.CSTNode) -> str | None:
    if m.matches(stmt, m.SimpleStatementLine(body=[m.Expr(m.Name())])):
        return _hole_of(stmt.body[0].value.value)
    return None


def _as_nodes(values: Mapping[str, object]) -> dict[str, cst.CSTNode]:
    nodes: dict[str, cst.CSTNode] = {}
    for name, value in values.items():
        nodes[name] = cst.parse_expression(value) if isinstance(value, str) else value  # filters: callables
    return nodes


def fill_expression(template: str, values: Mapping[str, object]) -> cst.BaseExpression:
    _check_filled(template, values)
    return parse_expression(template).visit(_Filler(_as_nodes(values)))


def fill_statements(python_code: str, values: Mapping[str, object]) -> list[cst.BaseStatement]:
    """Fill a template already turned into Python (and possibly formatted) with captured nodes."""
    _check_filled(python_code, values, already_python=True)
    module = cst.parse_module(python_code)
    return list(module.visit(_Filler(_as_nodes(values))).body)


def _check_filled(template: str, values: Mapping[str, object], already_python: bool = False) -> None:
    if already_python:
        used = [_split(_hole_of(t) or "") for t in re.findall(rf"\b{_PREFIX}\w+", template)]
    else:
        used = [(mo.group(1), mo.group(2)) for mo in _HOLE.finditer(template)]
    wanted = {name for name, _ in used} | {f"|{f}" for _, f in used if f}
    missing = sorted(name for name in wanted if name and name not in values)
    if missing:
        raise TemplateError(f"template {template.strip()!r} uses holes with no value: {', '.join(missing)}")


def names_in(values: Iterable[str]) -> list[str]:
    return [hole_name(v) for v in values]
