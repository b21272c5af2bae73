"""Read-only traversal of libcst trees, without libcst's cost of rebuilding every node.

``node.visit(visitor)`` calls ``_visit_and_replace_children`` even for a read-only :class:`libcst.CSTVisitor`:
each node is rebuilt (dataclass construction and validation) whether or not anything changed, which makes a walk
cost as much as parsing the file. The functions here read each node's children straight from its fields, in the
order libcst visits them (recorded once per node type from libcst itself), and never build a node:

- :func:`walk` is ``node.visit(visitor)`` for a visitor that only reads (the same ``on_visit``/``on_leave`` calls
  in the same order; the ``visit_<Node>_<attribute>`` hooks are not called: no visitor here defines one), and
  :func:`walk_many` the same for several visitors in one walk;
- :func:`children` is ``node.children``; :func:`parents` and :func:`positions` are libcst's metadata;
- :func:`findall` is ``libcst.matchers.findall`` without metadata (the same nodes in the same order), and only
  tries the matcher on nodes of the types it can match; below a node of the tree given to :func:`index` (the
  file's original module) it reads them from that index instead of walking, and in a tree built from it (the
  edited module) it walks only the nodes that are not the original's, once per module; a matcher of node types
  checks only the fields it constrains (:func:`_predicate`).
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Iterator

import libcst as cst
import libcst._nodes.op
import libcst._nodes.whitespace
import libcst.matchers as m
from libcst import CSTNode
from libcst.matchers._matcher_base import _attribute_matches, _construct_metadata_fetcher_null, _matches
from libcst.metadata import CodeRange, PositionProvider

_NO_METADATA = _construct_metadata_fetcher_null()

_FIELDS: dict[type, tuple[str, ...]] = {}  # node type -> the fields libcst visits, in its order


class _Recorder(cst.CSTVisitor):
    """Records which fields ``_visit_and_replace_children`` visits, without descending."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[str] = []

    def on_visit(self, node: CSTNode) -> bool:
        return False

    def on_leave(self, original_node: CSTNode) -> None:
        pass

    def on_visit_attribute(self, node: CSTNode, attribute: str) -> None:
        self.fields.append(attribute)

    def on_leave_attribute(self, original_node: CSTNode, attribute: str) -> None:
        pass


_PARTIAL: dict[type, tuple[tuple[str, ...], dict[tuple[bool, ...], tuple[str, ...]]]] = {}


def _fields(node: CSTNode) -> tuple[str, ...]:
    kind = type(node)
    fields = _FIELDS.get(kind)
    if fields is not None:
        return fields
    # libcst skips a field that is None on some node types (an f-string expression's ``format_spec``): until a
    # node of the type shows every field, the fields are recorded per pattern of None fields (one recording each,
    # not one per node: recording rebuilds the node)
    partial = _PARTIAL.get(kind)
    if partial is None:
        partial = _PARTIAL[kind] = (tuple(f.name for f in dataclasses.fields(node)), {})
    names, recorded = partial
    nones = tuple(getattr(node, name) is None for name in names)
    fields = recorded.get(nones)
    if fields is None:
        recorder = _Recorder()
        node._visit_and_replace_children(recorder)
        fields = recorded[nones] = tuple(dict.fromkeys(recorder.fields))
        # what this node shows holds for its type only when no field was left out that way
        if not any(name not in fields and none for name, none in zip(names, nones)):
            _FIELDS[kind] = fields
    return fields


_SHAPES: dict[type, int] = {}  # a field value's type -> 1: a node, 2: a sequence (of nodes), 0: anything else


def _shape(kind: type) -> int:
    """``isinstance`` answered once per type: libcst's node classes are ABCs, whose check is a Python call."""
    shape = _SHAPES.get(kind)
    if shape is None:
        shape = _SHAPES[kind] = 1 if issubclass(kind, CSTNode) else 2 if issubclass(kind, (tuple, list)) else 0
    return shape


def children(node: CSTNode) -> list[CSTNode]:
    """``node.children``: the child nodes in the order libcst visits them."""
    found: list[CSTNode] = []
    fields = _FIELDS.get(type(node))
    for name in fields if fields is not None else _fields(node):
        value = getattr(node, name)
        shape = _SHAPES.get(type(value))
        if shape is None:
            shape = _shape(type(value))
        if shape == 1:
            found.append(value)
        elif shape == 2:
            found.extend(item for item in value if _shape(type(item)) == 1)
    return found


# the node types of libcst's whitespace and operator modules: whitespace, comments, newlines, punctuation,
# operators (three nodes in five of a modeling file), whose subtrees hold nothing else
TRIVIA: frozenset[type] = frozenset(
    kind
    for module in (libcst._nodes.whitespace, libcst._nodes.op)
    for kind in vars(module).values()
    if isinstance(kind, type) and issubclass(kind, CSTNode) and kind.__module__ == module.__name__
)
_NOTHING: frozenset[type] = frozenset()
_PASSES: dict[type, frozenset[type]] = {}


def _passes(kind: type) -> frozenset[type]:
    """The node types a walk of a visitor of type ``kind`` need not enter: the trivia, when calling it there
    could do nothing (no ``visit_``/``leave_`` hook for a trivia type, and ``on_visit``/``on_leave`` are libcst's,
    or the visitor declares ``TRIVIA_FREE``: its own look at nothing trivia would change), else none."""
    found = _PASSES.get(kind)
    if found is None:
        plain = kind.on_visit is cst.CSTVisitor.on_visit and kind.on_leave is cst.CSTVisitor.on_leave
        hooked = any(
            getattr(kind, hook, None) is not getattr(cst.CSTVisitor, hook, None)
            for trivia in TRIVIA
            for hook in (f"visit_{trivia.__name__}", f"leave_{trivia.__name__}")
        )
        found = _PASSES[kind] = TRIVIA if (plain or getattr(kind, "TRIVIA_FREE", False)) and not hooked else _NOTHING
    return found


def walk(node: CSTNode, visitor: cst.CSTVisitor) -> None:
    """``node.visit(visitor)`` for a read-only visitor, without rebuilding the tree (nor entering trivia where
    the visitor could do nothing there, :func:`_passes`)."""
    passes = _PASSES.get(type(visitor))
    _walk(node, visitor, _passes(type(visitor)) if passes is None else passes)


def _walk(node: CSTNode, visitor: cst.CSTVisitor, passes: frozenset[type]) -> None:
    if visitor.on_visit(node):
        for child in children(node):
            if type(child) not in passes:
                _walk(child, visitor, passes)
    visitor.on_leave(node)


def walk_many(node: CSTNode, visitors: list[cst.CSTVisitor]) -> None:
    """:func:`walk` with several visitors at once: each sees the same calls as if it walked alone (one that skips
    a subtree is not called below it); the walk itself is done once."""
    going = [visitor for visitor in visitors if visitor.on_visit(node)]
    if going:
        for child in children(node):
            walk_many(child, going)
    for visitor in visitors:
        visitor.on_leave(node)


def nodes(root: CSTNode, statements: bool = False) -> Iterator[CSTNode]:
    """Every node of the subtree, ``root`` first, in the order a visitor sees them (pre-order); with
    ``statements``, no expression or trivia and nothing inside one."""
    stack = [root]
    while stack:
        node = stack.pop()
        if statements and _expression(type(node)):
            continue
        yield node
        below = children(node)
        below.reverse()
        stack.extend(below)


def matcher_kinds(matcher: object) -> frozenset[str] | None:
    """The names of the node types ``matcher`` can match, or None when that is not known (any node)."""
    if isinstance(matcher, (m.OneOf, m.TypeOf)):
        kinds = [matcher_kinds(option) for option in matcher.options]
        return None if any(k is None for k in kinds) else frozenset().union(*kinds)
    if isinstance(matcher, (m.AllOf, m.MatchIfTrue, m.MatchMetadata, m.MatchMetadataIfTrue)):
        return None
    if not isinstance(matcher, m.BaseMatcherNode):
        return None
    name = type(matcher).__name__
    node_type = getattr(cst, name, None)
    if isinstance(node_type, type) and issubclass(node_type, CSTNode) and getattr(m, name, None) is type(matcher):
        return frozenset({name})
    return None


class _Index:
    """The nodes of one tree in pre-order, where each subtree starts and ends in that order, and the positions of
    each node type: a findall below any node of the tree is a slice, not a walk."""

    def __init__(self, root: CSTNode) -> None:
        self.root = root  # kept alive: the index is keyed on its nodes
        self.order: list[CSTNode] = []
        self.spans: dict[CSTNode, tuple[int, int]] = {}
        self.kinds: dict[str, list[int]] = {}
        self._add(root)

    def _add(self, node: CSTNode) -> None:
        start = len(self.order)
        self.order.append(node)
        self.kinds.setdefault(type(node).__name__, []).append(start)
        for child in children(node):
            self._add(child)
        self.spans[node] = (start, len(self.order))

    def candidates(self, tree: CSTNode, kinds: frozenset[str] | None) -> list[CSTNode] | None:
        """The nodes of ``tree``'s subtree of those types (any type: None), in pre-order; None if not indexed."""
        span = self.spans.get(tree)
        if span is None:
            return None
        start, end = span
        if kinds is None:
            return self.order[start:end]
        found: list[int] = []
        for kind in kinds:
            positions = self.kinds.get(kind, ())
            found.extend(positions[bisect.bisect_left(positions, start) : bisect.bisect_left(positions, end)])
        if len(kinds) > 1:
            found.sort()
        return [self.order[i] for i in found]


_INDEX: list[_Index] = []  # the index of the tree being migrated (one at a time)


def index(root: CSTNode) -> None:
    """Index ``root`` (the original module of the file being migrated; it replaces the previous one) for
    :func:`findall`. Its nodes are never rebuilt (libcst nodes are immutable), so the index stays right."""
    _INDEX[:] = [_Index(root)]
    _BUILT.clear()


_BUILT: dict[int, tuple[CSTNode, list[CSTNode]]] = {}  # the last trees built from the original: every node


# node types that never stand inside an expression (statements, their blocks and the parts only they hold): a
# findall of these alone need not walk into any expression (most of a tree's nodes)
_OUTSIDE_EXPRESSIONS = (cst.BaseStatement, cst.BaseSmallStatement, cst.BaseSuite, cst.AssignTarget, cst.Decorator)
_OUTSIDE_EXPRESSIONS += (cst.ExceptHandler, cst.ExceptStarHandler, cst.Else, cst.Finally, cst.ImportAlias)
_STATEMENT_KINDS: dict[frozenset[str] | None, bool] = {}


def _statement_kinds(kinds: frozenset[str] | None) -> bool:
    """Whether every type of ``kinds`` is one that never stands inside an expression."""
    found = _STATEMENT_KINDS.get(kinds)
    if found is None:
        found = _STATEMENT_KINDS[kinds] = kinds is not None and all(
            isinstance(getattr(cst, kind, None), type) and issubclass(getattr(cst, kind), _OUTSIDE_EXPRESSIONS)
            for kind in kinds
        )
    return found


_EXPRESSIONS: dict[type, bool] = {}  # a node type -> whether it is an expression or trivia (once per type)


def _expression(kind: type) -> bool:
    """Whether no statement type stands below a node of type ``kind``: an expression, or trivia."""
    found = _EXPRESSIONS.get(kind)
    if found is None:
        found = _EXPRESSIONS[kind] = issubclass(kind, cst.BaseExpression) or kind in TRIVIA
    return found


def _built(tree: CSTNode, kinds: frozenset[str] | None, indexed: _Index) -> list[CSTNode]:
    """:func:`_mixed` for a whole module built from the original (the migrated one), read by several findalls:
    its nodes are listed once (:func:`_mixed`) and each findall picks its types from that list (a findall of
    statement types walks only the module's statements, :func:`_statement_kinds`)."""
    if not isinstance(tree, cst.Module) or _statement_kinds(kinds):
        return _mixed(tree, kinds, indexed)
    found = _BUILT.get(id(tree))
    if found is None or found[0] is not tree:
        if len(_BUILT) > 1:
            _BUILT.clear()
        found = _BUILT[id(tree)] = (tree, _mixed(tree, None, indexed))  # the tree is kept: its id stays its own
    every = found[1]
    return list(every) if kinds is None else [node for node in every if type(node).__name__ in kinds]


def _mixed(tree: CSTNode, kinds: frozenset[str] | None, indexed: _Index) -> list[CSTNode]:
    """The nodes of ``tree`` of those types in pre-order, where ``tree`` is not indexed but may hold indexed
    subtrees (an edited module keeps every original node no edit touched): those are slices of the index, only
    the new nodes are walked (and no expression, for a findall of statement types)."""
    found: list[CSTNode] = []
    stack = [tree]
    statements = _statement_kinds(kinds)
    while stack:
        node = stack.pop()
        if node in indexed.spans:
            found.extend(indexed.candidates(node, kinds) or ())
            continue
        if statements and _expression(type(node)):
            continue
        if kinds is None or type(node).__name__ in kinds:
            found.append(node)
        below = children(node)
        below.reverse()
        stack.extend(below)
    return found


def _plain(matcher: object) -> tuple[str, tuple[tuple[str, object], ...]] | None:
    """(the node type's name, the fields it constrains) of a matcher of one node type that constrains no metadata
    (``m.Name()``, ``m.Assign(targets=[...])``); None for any other matcher."""
    kinds = matcher_kinds(matcher)
    if kinds is None or len(kinds) != 1 or isinstance(matcher, (m.OneOf, m.TypeOf)):
        return None
    constrained = []
    for field in dataclasses.fields(matcher):
        desired = getattr(matcher, field.name)
        if field.name == "_metadata" or isinstance(desired, m.DoNotCareSentinel):
            continue
        if field.name == "metadata":
            return None
        constrained.append((field.name, desired))
    return next(iter(kinds)), tuple(constrained)


def _predicate(matcher: object):
    """``lambda node: _matches(node, matcher, no metadata) is not None`` for the nodes :func:`findall` tries,
    answered the same way: a matcher of one node type (or a ``OneOf``/``TypeOf`` of such) checks the node's type
    and only the fields it constrains, where libcst's ``_node_matches`` reads every field of the matcher (one
    ``dataclasses.fields`` call and one comparison per field, per node) and merges the captures, which findall
    never reads. A node matched here is never a ``MaybeSentinel`` (findall yields nodes)."""
    options = matcher.options if isinstance(matcher, (m.OneOf, m.TypeOf)) else (matcher,)
    plains = [_plain(option) for option in options]
    if any(plain is None for plain in plains):
        return lambda node: _matches(node, matcher, _NO_METADATA) is not None

    def matches(node: CSTNode) -> bool:
        name = type(node).__name__
        for kind, constrained in plains:
            if name == kind and all(
                _attribute_matches(getattr(node, field), desired, _NO_METADATA) is not None
                for field, desired in constrained
            ):
                return True
        return False

    return matches


def findall(tree: object, matcher: object) -> list[CSTNode]:
    """``libcst.matchers.findall(tree, matcher)``: every node of ``tree`` (itself included) that matches."""
    if not isinstance(tree, CSTNode) or isinstance(matcher, (m.AtLeastN, m.AtMostN)):
        return []
    kinds = matcher_kinds(matcher)
    if _INDEX:
        candidates = _INDEX[0].candidates(tree, kinds)
        if candidates is None:  # a tree built from the original one (the migrated module): its original subtrees
            candidates = _built(tree, kinds, _INDEX[0])
    elif kinds is None:
        candidates = list(nodes(tree))
    else:
        candidates = [node for node in nodes(tree, _statement_kinds(kinds)) if type(node).__name__ in kinds]
    if not candidates:
        return candidates
    matches = _predicate(matcher)
    return [node for node in candidates if matches(node)]


def positions(module: cst.Module) -> dict[CSTNode, CodeRange]:
    """``MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)``: the same positions, from the
    one generation of the module's text that computes them. libcst's resolver first runs a batched visit of the
    whole tree for its batchable providers, even when there is none (a walk that rebuilds every node)."""
    provider = PositionProvider()
    provider._computed = {}
    provider._gen_impl(module)
    return provider._computed


def parents(root: CSTNode) -> dict[CSTNode, CSTNode]:
    """``MetadataWrapper(root).resolve(ParentNodeProvider)`` for a tree that is not copied: each node's parent
    (recorded as libcst does, when the parent is left)."""
    found: dict[CSTNode, CSTNode] = {}

    def leave(node: CSTNode) -> None:
        below = children(node)
        for child in below:
            leave(child)
        for child in below:
            found[child] = node

    leave(root)
    return found
