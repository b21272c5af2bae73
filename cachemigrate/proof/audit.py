"""The region proof: the migrated file equals the original everywhere outside what the rules claimed.

Every edit names original nodes (:mod:`cachemigrate.edit.edits`). Their text spans in the original file are its
*claimed regions*; an insertion claims a zero-width point. The original text is cut at the claims into frozen
segments, and the migrated text must be those segments, in order and byte for byte, with anything at all between
them where a claim was. A statement deleted, moved or altered anywhere else, a comment lost, a line ending
changed: each breaks a frozen segment, and the engine refuses the result.

Offsets are recorded while each top-level statement's text is generated (:class:`_Spans`), in the one pass that
finds where each statement starts; no position metadata is resolved.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

import libcst as cst
from libcst._nodes.internal import CodegenState

from ..edit.edits import Edit, Rename, Replace


@dataclasses.dataclass(frozen=True)
class Claim:
    rule: str
    start: int  # character offsets in the original text; start == end for an insertion point
    end: int


@dataclasses.dataclass(frozen=True)
class Violation:
    line: int  # first line of the original text that the migrated file lost or changed
    excerpt: str

    def describe(self) -> str:
        return f"line {self.line} (`{self.excerpt}`) changed although no rule claimed it"


class _Spans(CodegenState):
    """Code generation that records each node's character span in the text it generates, whitespace and comments
    it owns included: what libcst's ``WhitespaceInclusivePositionProvider`` computes as lines and columns, without
    its metadata pass (a walk of the tree) and without a second generation of the text."""

    def __init__(self, default_indent: str, default_newline: str) -> None:
        super().__init__(default_indent=default_indent, default_newline=default_newline)
        self.length = 0
        self.spans: dict[cst.CSTNode, tuple[int, int]] = {}
        self.starts: list[int] = []

    def add_indent_tokens(self) -> None:
        self.tokens.extend(self.indent_tokens)
        self.length += sum(map(len, self.indent_tokens))

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        self.length += len(value)

    def before_codegen(self, node: cst.CSTNode) -> None:
        self.starts.append(self.length)

    def after_codegen(self, node: cst.CSTNode) -> None:
        start = self.starts.pop()
        if node not in self.spans:  # a node object in two places: the first one, as libcst's provider keeps it
            self.spans[node] = (start, self.length)


class Offsets:
    """Character offsets of original nodes of ``module`` (whose code is the original text)."""

    def __init__(self, module: cst.Module, code: str | None = None) -> None:
        self.module = module
        self.code = module.code if code is None else code  # ``code``: the text the module was parsed from
        pieces = [module.code_for_node(line) for line in module.header]
        self.starts: list[int] = []
        offset = sum(map(len, pieces))
        self.tops = list(module.body)
        self._spans: list[dict[cst.CSTNode, tuple[int, int]]] = []
        for stmt in self.tops:  # each top-level statement generated on its own, as code_for_node does
            state = _Spans(module.default_indent, module.default_newline)
            stmt._codegen(state)
            self.starts.append(offset)
            self._spans.append(state.spans)
            offset += state.length
        self.body_end = min(offset, len(self.code))
        self._index = {stmt: i for i, stmt in enumerate(self.tops)}

    def _top(self, node: cst.CSTNode, path: Sequence[cst.CSTNode]) -> int:
        for candidate in (*path[1:2], node):
            if candidate in self._index:
                return self._index[candidate]
        raise LookupError("the node is not inside a top-level statement of the original module")

    def span(self, node: cst.CSTNode, path: Sequence[cst.CSTNode]) -> tuple[int, int]:
        """(start, end) of ``node`` with the whitespace and comments it owns (a statement's leading lines)."""
        if node is self.module:
            return 0, len(self.code)
        index = self._top(node, path)
        start, end = self._spans[index][node]
        base = self.starts[index]
        return min(base + start, len(self.code)), min(base + end, len(self.code))

    def insertion_point(self, block: cst.CSTNode, index: int, path: Sequence[cst.CSTNode]) -> int:
        body = list(block.body)
        block_path = (*path, block)
        if index < len(body):
            return self.span(body[index], block_path)[0]
        if body:
            return self.span(body[-1], block_path)[1]
        return self.span(block, path)[1] if block is not self.module else self.body_end

    def line_of(self, offset: int) -> int:
        return self.code.count("\n", 0, offset) + 1


def claims_of(edits: Iterable[Edit], extra: Iterable[tuple[str, cst.CSTNode, str]], offsets: Offsets) -> list[Claim]:
    """The original regions the edits (and what the applier did on their behalf) claim."""
    claims: list[Claim] = []
    edits = [e for e in edits if not isinstance(e, Rename)]  # a rename claims nothing itself
    for edit in edits:
        if isinstance(edit, Replace) and edit.claim == "header":
            start = offsets.span(edit.node, edit.path)[0]
            end = offsets.span(edit.node.body, (*edit.path, edit.node))[0]
        elif isinstance(edit, Replace):
            start, end = offsets.span(edit.node, edit.path)
        elif edit.count:
            block_path = (*edit.path, edit.block)
            start = offsets.span(edit.statements[0], block_path)[0]
            end = offsets.span(edit.statements[-1], block_path)[1]
        else:
            start = end = offsets.insertion_point(edit.block, edit.index, edit.path)
        claims.append(Claim(edit.rule, start, end))
    prefixes: dict[cst.CSTNode, tuple] = {}
    for edit in edits:
        for depth, node in enumerate(edit.path):
            prefixes.setdefault(node, edit.path[:depth])
    for rule, node, part in extra:
        if node not in prefixes:  # the applier only ever changes nodes on the way to an edit
            raise LookupError(f"the applier changed a node on behalf of {rule} that no edit of it leads to")
        start, end = offsets.span(node, prefixes[node])
        if part == "header":
            end = offsets.span(node.body, (*prefixes[node], node))[0]
        claims.append(Claim(rule, start, end))
    return claims


def _merge(claims: Sequence[Claim]) -> list[tuple[int, int]]:
    spans = sorted((c.start, c.end) for c in claims)
    merged: list[list[int]] = []
    for start, end in spans:
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def find_violation(original: str, migrated: str, claims: Sequence[Claim]) -> Violation | None:
    """None when ``migrated`` is ``original`` with only the claimed regions changed, else where it is not."""
    spans = _merge(claims)
    segments: list[tuple[int, str]] = []
    position = 0
    for start, end in spans:
        segments.append((position, original[position:start]))
        position = end
    segments.append((position, original[position:]))
    at = 0
    for number, (where, text) in enumerate(segments):
        if number == 0:
            found = 0 if migrated.startswith(text) else -1
        elif number == len(segments) - 1:
            found = len(migrated) - len(text) if migrated.endswith(text) and len(migrated) - len(text) >= at else -1
        else:
            found = migrated.find(text, at)
        if found < 0:
            return _violation(original, where, text, migrated, at)
        at = found + len(text)
    return None


def _violation(original: str, where: int, text: str, migrated: str, at: int) -> Violation:
    """Locate the first line of the frozen segment ``text`` (at ``where``) that the migrated file lost."""
    lines = text.splitlines(keepends=True)
    offset = where
    for line in lines:
        if line.strip() and migrated.find(line, at) < 0:
            break
        found = migrated.find(line, at)
        if found >= 0:
            at = found + len(line)
        offset += len(line)
    else:
        offset = where
    line_number = original.count("\n", 0, offset) + 1
    excerpt = original[offset:].splitlines()[0].strip() if original[offset:] else ""
    return Violation(line_number, excerpt[:80])
