"""The read-only traversal sees what libcst's own visit sees: the same nodes, in the same order, the same parents,
the same findall answers, on code that uses many kinds of node."""

import textwrap

import libcst as cst
import libcst.matchers as m
from libcst.metadata import MetadataWrapper, ParentNodeProvider, PositionProvider

from cachemigrate import traverse

CODE = textwrap.dedent('''
    """Doc."""
    from __future__ import annotations
    from . import a as b, c
    from .x import *
    import os.path as p

    @decorator(1, key=2)
    class Model(Base, metaclass=Meta):
        x: int = 3

        async def forward(self, past=None, *args, key: "str" = "v", **kwargs) -> tuple[int, ...]:
            global g
            lam = lambda q, *r: q + r[0]
            k, (v, w) = past[0], past[1:2]
            k += torch.cat((k, v), dim=-2) if past is not None else -v
            with open(p) as f, ctx():
                async for item in f:
                    yield item
            try:
                del k[0]
            except (ValueError, KeyError) as exc:
                raise RuntimeError(f"bad {exc!r:>10}") from exc
            finally:
                pass
            while not (a := w) and b or c:
                continue
            match lam:
                case [1, *rest] | {"k": _} if rest:
                    print(*rest, sep="")
                case Point(x=0):
                    pass
            return {i: j for i, j in zip(a, b) if i}, [x async for x in y], (yield), await z, ...
    ''')


class _Log(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, cst.CSTNode]] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.log.append(("visit", node))
        return not isinstance(node, cst.Lambda)  # a visitor that skips a subtree

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.log.append(("leave", original_node))


def _same(a, b) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def test_walk_children_and_parents_are_libcsts():
    module = cst.parse_module(CODE)
    expected, got = _Log(), _Log()
    module.visit(expected)
    traverse.walk(module, got)
    assert [kind for kind, _ in got.log] == [kind for kind, _ in expected.log]
    assert _same([node for _, node in got.log], [node for _, node in expected.log])
    every = list(traverse.nodes(module))
    assert len({type(node) for node in every}) > 60
    assert all(_same(traverse.children(node), node.children) for node in every)
    libcst_parents = MetadataWrapper(module, unsafe_skip_copy=True).resolve(ParentNodeProvider)
    ours = traverse.parents(module)
    assert set(ours) == set(libcst_parents) and all(ours[n] is libcst_parents[n] for n in ours)
    libcst_positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    placed = traverse.positions(module)
    assert set(placed) == set(libcst_positions) and all(placed[n] == libcst_positions[n] for n in placed)


def test_findall_is_libcsts():
    module = cst.parse_module(CODE)
    matchers = [
        m.Name(),
        m.Name("k"),
        m.Call() | m.Subscript() | m.Lambda(),
        m.AssignTarget(m.Tuple()) | m.AugAssign(target=m.Name("k")),
        m.MatchIfTrue(lambda node: isinstance(node, cst.Comparison)),
        m.AllOf(m.Name(), m.Name("past")),
        m.DoesNotMatch(m.Name()),
        m.BaseExpression(),
        m.Module(),
        # matchers of node types that constrain some fields: only those are checked (traverse._predicate)
        m.Assign(targets=[m.AssignTarget(m.Name())]),
        m.Call(func=m.Attribute(attr=m.Name("cat"))),
        m.Name(value=m.MatchIfTrue(lambda value: value.startswith("p"))),
        m.Subscript(value=m.Name("past")) | m.Attribute(value=m.Name("os")),
        m.TypeOf(m.Name, m.Attribute)(),
        m.Param(default=None),
        m.Comparison(comparisons=[m.ZeroOrMore(), m.ComparisonTarget(m.IsNot())]),
        m.SaveMatchedNode(m.Name(), "saved"),
        m.Lambda(params=m.DoesNotMatch(m.Parameters(params=[]))),
    ]
    for matcher in matchers:
        assert _same(traverse.findall(module, matcher), m.findall(module, matcher)), matcher
    function = next(n for n in traverse.nodes(module) if isinstance(n, cst.FunctionDef))
    assert _same(traverse.findall(function.body, m.Name()), m.findall(function.body, m.Name()))
    assert traverse.findall(cst.MaybeSentinel.DEFAULT, m.Name()) == []


def test_findall_from_the_index_is_libcsts():
    module = cst.parse_module(CODE)
    traverse.index(module)
    function = next(n for n in traverse.nodes(module) if isinstance(n, cst.FunctionDef))
    built = cst.parse_expression("f(a, b[0])")  # not in the index: walked
    # a module built from the original (one statement replaced): its new nodes walked once, the rest from the index
    edited = module.with_changes(body=[*module.body[:-1], cst.parse_statement("x = g(y)[0]\n")])
    for tree in (module, function, function.body, function.params, built, edited, edited):
        for matcher in (m.Name(), m.Call() | m.Subscript() | m.Lambda(), m.MatchIfTrue(lambda n: True), m.Arg()):
            assert _same(traverse.findall(tree, matcher), m.findall(tree, matcher)), (tree, matcher)


def test_a_field_libcst_skips_when_it_is_none_is_walked_where_it_is_set():
    """An f-string expression without a format spec seen first must not hide the spec of a later one."""
    traverse._FIELDS.clear()  # as in a fresh process: what libcst visits is learned from the first node of a type
    module = cst.parse_module('a = f"{x}"\nb = f"{y:>{width}}"\n')
    expected, got = _Log(), _Log()
    module.visit(expected)
    traverse.walk(module, got)
    assert _same([node for _, node in got.log], [node for _, node in expected.log])
    assert any(isinstance(node, cst.Name) and node.value == "width" for node in traverse.nodes(module))


STATEMENT_MATCHERS = [
    m.Assign(),
    m.AssignTarget(m.Name()) | m.AugAssign(target=m.Name("k")),
    m.Import() | m.ImportFrom(),
    m.ImportAlias(),
    m.Decorator(),
    m.ExceptHandler() | m.Else() | m.Finally(),
    m.Return() | m.Pass() | m.Expr(),
    m.IndentedBlock(),
    m.SimpleStatementLine(),
    m.FunctionDef(),
]


def test_findall_of_statement_types_is_libcsts_and_walks_no_expression(monkeypatch):
    """A findall of types that never stand in an expression skips expressions, and finds what libcst finds:
    without an index, below the index, and in a module built from the indexed one."""
    assert all(traverse._statement_kinds(traverse.matcher_kinds(matcher)) for matcher in STATEMENT_MATCHERS)
    for other in (m.Name(), m.Param(), m.Assign() | m.Name(), m.MatchIfTrue(lambda n: True), m.Arg(), m.Module()):
        assert not traverse._statement_kinds(traverse.matcher_kinds(other)), other
    module = cst.parse_module(CODE)
    traverse._INDEX.clear()
    walked = []
    children = traverse.children
    monkeypatch.setattr(traverse, "children", lambda node: walked.append(node) or children(node))
    for matcher in STATEMENT_MATCHERS:
        assert _same(traverse.findall(module, matcher), m.findall(module, matcher)), matcher
    assert walked and not any(isinstance(node, cst.BaseExpression) or type(node) in traverse.TRIVIA for node in walked)
    every = len(list(traverse.nodes(module)))
    assert len(walked) < every * len(STATEMENT_MATCHERS) / 2
    traverse.index(module)
    edited = module.with_changes(body=[*module.body[:-1], cst.parse_statement("if x:\n    y = g(y)[0]\n")])
    function = next(n for n in traverse.nodes(module) if isinstance(n, cst.FunctionDef))
    reparsed = cst.parse_module(CODE)
    for tree in (module, function, edited, edited, reparsed, reparsed.body[-1]):
        for matcher in STATEMENT_MATCHERS:
            assert _same(traverse.findall(tree, matcher), m.findall(tree, matcher)), (tree, matcher)


class _Names(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.log: list[cst.CSTNode] = []

    def visit_Name(self, node: cst.Name) -> None:
        self.log.append(node)


class _Commas(_Names):
    def visit_Comma(self, node: cst.Comma) -> None:
        self.log.append(node)


class _Declared(_Log):
    TRIVIA_FREE = True


def test_walk_enters_trivia_only_where_the_visitor_can_act_there(monkeypatch):
    module = cst.parse_module(CODE)
    walked = []
    children = traverse.children
    monkeypatch.setattr(traverse, "children", lambda node: walked.append(node) or children(node))
    for kind in (_Names, _Commas, _Log):
        expected, got = kind(), kind()
        module.visit(expected)
        walked.clear()
        traverse.walk(module, got)
        assert _same(_flat(got.log), _flat(expected.log)), kind
        # only a visitor that cannot act at trivia skips it: a plain one with no trivia hook
        assert any(type(node) in traverse.TRIVIA for node in walked) == (kind is not _Names), kind
    # a visitor of its own on_visit/on_leave that declares them trivia-free sees everything else, in order
    expected, got = _Log(), _Declared()
    module.visit(expected)
    traverse.walk(module, got)
    assert _same(_flat([(k, n) for k, n in expected.log if type(n) not in traverse.TRIVIA]), _flat(got.log))


def _flat(log: list) -> list:
    return [part for entry in log for part in (entry if isinstance(entry, tuple) else (entry,))]
