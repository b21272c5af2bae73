"""Use classification: each use of a cache variable in one function, by what it does with the cache.

``check`` (``x is None``, ``isinstance``, a truth test), ``api`` (an attribute: the Cache API), ``pass`` (handed on
unchanged), ``alias`` (bound to another name) and ``legacy`` (anything that relies on the tuple layout). See
:mod:`cachemigrate.facts.analysis` for how the roles follow from the uses.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import libcst as cst
import libcst.matchers as m

from ..views.patterns import code_of
from .model import CACHE_ONLY_ATTRIBUTES, CacheUse, FunctionInfo  # noqa: F401 (re-exported)
from ..traverse import findall, parents

CONSUMING_BUILTINS = frozenset(
    {"zip", "len", "enumerate", "tuple", "list", "iter", "map", "reversed", "sum", "any", "all", "sorted", "next"}
)
CHECKING_BUILTINS = frozenset({"isinstance", "type", "hasattr", "getattr", "id"})
GUARD_TYPES = frozenset({"Cache", "DynamicCache", "StaticCache", "EncoderDecoderCache"})
# `isinstance(x, Cache)` and the like: code guarded by it already handles a Cache
CACHE_GUARD = m.Call(
    func=m.Name("isinstance"), args=[m.Arg(), m.Arg(m.Name(m.MatchIfTrue(lambda name: name in GUARD_TYPES)))]
)


# --------------------------------------------------------------------------------------------------------------
# Use classification
# --------------------------------------------------------------------------------------------------------------


def _is_none(node: cst.CSTNode) -> bool:
    return m.matches(node, m.Name("None"))


def _statement_text(stmt: cst.CSTNode) -> str:
    if isinstance(stmt, (cst.If, cst.For, cst.While, cst.With)):
        head = {cst.If: "if", cst.For: "for", cst.While: "while", cst.With: "with"}[type(stmt)]
        if isinstance(stmt, cst.If):
            return f"if {code_of(stmt.test)}:"
        if isinstance(stmt, cst.For):
            return f"for {code_of(stmt.target)} in {code_of(stmt.iter)}:"
        if isinstance(stmt, cst.While):
            return f"while {code_of(stmt.test)}:"
        return head
    return code_of(stmt)


class _UseCollector(cst.CSTVisitor):
    """Collects the uses of cache variables in one function body (nested functions included)."""

    TRIVIA_FREE = True  # on_visit/on_leave act on statements and functions; a trivia's parent: :meth:`parent`

    def __init__(self, function: cst.FunctionDef, info: FunctionInfo, names: Iterable[str]) -> None:
        super().__init__()
        self.function = function
        self.info = info
        self.names = set(names)
        self.guarded: set[cst.CSTNode] = set()  # nodes below an isinstance(x, Cache) guard
        # statements after a cache variable was rebound to a fresh tuple on every path, and those variables
        self.rebound: dict[cst.CSTNode, set[str]] = {}
        self.active: list[set[str]] = []  # the variables rebound around the node being visited
        self.shadowing: list[cst.CSTNode] = []  # nested functions whose parameters shadow a cache name
        # each node's parent, recorded as the walk of the body enters it (the body's, the function's and the module's
        # beforehand, as traverse.parents of a module holding the function gives them)
        module = cst.Module(body=[function])
        self.parents: dict[cst.CSTNode, cst.CSTNode | None] = {function.body: function, function: module, module: None}
        self.path: list[cst.CSTNode] = []  # the walk's nodes, down to the one being visited
        self.everywhere: dict[cst.CSTNode, cst.CSTNode] | None = None

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """Recorded for a node the walk entered (the lookups here are of its ancestors), else computed whole."""
        if node in self.parents:
            return self.parents[node]
        if self.everywhere is None:
            self.everywhere = parents(cst.Module(body=[self.function]))
        return self.everywhere.get(node)

    # -- guards: `a if isinstance(x, Cache) else <legacy>` and `if isinstance(x, Cache): ... return` ----------

    def _guard_test(self, test: cst.BaseExpression) -> bool:
        return m.matches(
            test,
            m.Call(
                func=m.Name("isinstance"),
                args=[m.Arg(m.Name()), m.Arg(m.Name(m.MatchIfTrue(lambda v: v in GUARD_TYPES)))],
            ),
        )

    def visit_IfExp(self, node: cst.IfExp) -> None:
        if self._guard_test(node.test):
            self.guarded.add(node.orelse)
        elif self._tuple_only(node.test):  # `<tuple code> if not isinstance(x, Cache) else <Cache code>`
            self.guarded.add(node.body)

    def visit_If(self, node: cst.If) -> None:
        # `if ... and not isinstance(x, Cache):` (or `isinstance(x, tuple)`): a branch only tuples reach
        if any(self._tuple_only(part) for part in _conjuncts(node.test)):
            self.guarded.add(node.body)
        # `if isinstance(x, Cache): ... else: <tuple code>`: the else branch only tuples reach
        if self._guard_test(node.test) and isinstance(node.orelse, cst.Else):
            self.guarded.add(node.orelse)

    def visit_BooleanOperation(self, node: cst.BooleanOperation) -> None:
        # `a and not isinstance(x, Cache) and x[0]...`: what comes after the guard only ever reads a tuple
        parts = _conjuncts(node)
        for index, part in enumerate(parts):
            if self._tuple_only(part):
                self.guarded.update(parts[index + 1 :])
                break
        # `isinstance(x, Cache) or len(x) == 2`: what comes after the guard runs only for a tuple
        parts = _disjuncts(node)
        for index, part in enumerate(parts):
            if self._guard_test(part):
                self.guarded.update(parts[index + 1 :])
                break

    def visit_Assert(self, node: cst.Assert) -> None:
        # `assert isinstance(x, Cache) or len(x) == 2, f"... {len(x)}"`: the message is said for a tuple only
        if node.msg is not None and any(self._guard_test(part) for part in _disjuncts(node.test)):
            self.guarded.add(node.msg)

    def _tuple_only(self, test: cst.BaseExpression) -> bool:
        if m.matches(test, m.UnaryOperation(operator=m.Not())):
            return self._guard_test(test.expression)
        return m.matches(
            test,
            m.Call(func=m.Name("isinstance"), args=[m.Arg(m.Name()), m.Arg(m.Name("tuple") | m.Name("list"))]),
        )

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._guard_block(node.body)
        self._rebound_block(node.body)

    def _rebound_block(self, body: Sequence[cst.BaseStatement]) -> None:
        """``present = (key, value)`` into the cache's own name (MPT: ``past_key_value = (key_states,
        value_states)``, in both branches of ``if past_key_value is not None: ... else: ...``): what follows in the
        block reads that tuple, not the cache."""
        for index, stmt in enumerate(body):
            names = {n for n in self.names if _rebinds_to_tuple(stmt, n)}
            for later in body[index + 1 :]:
                self.rebound.setdefault(later, set()).update(names)

    def _guard_block(self, body: Sequence[cst.BaseStatement]) -> None:
        for index, stmt in enumerate(body):
            if (
                isinstance(stmt, cst.If)
                and stmt.orelse is None
                and self._guard_test(stmt.test)
                and m.matches(stmt.body.body[-1], m.SimpleStatementLine(body=[m.Return()]))
            ):
                self.guarded.update(body[index + 1 :])

    def _shadowed(self, node: cst.CSTNode) -> set[str]:
        """The cache names a nested function or lambda takes as its own parameters (a helper
        ``def project(states, proj, past_key_value):`` handed one tensor of the layer past): inside it they are
        that parameter, not the cache."""
        if not isinstance(node, (cst.FunctionDef, cst.Lambda)):
            return set()
        params = node.params
        found = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
        found |= {p.name.value for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)}
        return found & self.names

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.path:
            self.parents[node] = self.path[-1]
        self.path.append(node)
        if node in self.rebound:  # on_leave follows even when the node's children are skipped
            self.active.append(self.rebound[node])
        shadowed = self._shadowed(node)
        if shadowed:
            self.active.append(shadowed)
            self.shadowing.append(node)
        if node in self.guarded:
            return False
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        if self.shadowing and self.shadowing[-1] is original_node:
            self.shadowing.pop()
            self.active.pop()
        if original_node in self.rebound:
            self.active.pop()
        super().on_leave(original_node)
        self.path.pop()

    # -- uses -----------------------------------------------------------------------------------------------

    def visit_Name(self, node: cst.Name) -> None:
        if node.value not in self.names or any(node.value in names for names in self.active):
            return
        parent = self.parent(node)
        if parent is None or self._is_binding(node, parent):
            return
        kind, context = self.classify(node, parent)
        if kind == "alias":
            self.names.update(self._alias_targets(node, context))
        elif kind == "legacy":
            self.names.update(self._part_targets(context))
        stmt = context
        while stmt is not None and not isinstance(stmt, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            stmt = self.parent(stmt)
        self.info.uses.append(
            CacheUse(
                variable=node.value,
                kind=kind,
                function=self.info.qualname,
                idiom=self._idiom(kind, node, context),
                statement=_statement_text(stmt) if stmt is not None else code_of(context),
                node=node,
            )
        )

    def _idiom(self, kind: str, node: cst.Name, context: cst.CSTNode) -> str:
        if kind == "pass":
            call = self.parent(self.parent(node)) if isinstance(self.parent(node), cst.Arg) else None
            if isinstance(call, cst.Call):
                return code_of(call.func)
        if isinstance(context, cst.BaseCompoundStatement):  # `for layer in past:` is the idiom, not its body
            return _statement_text(context)
        return code_of(context)

    def _is_binding(self, node: cst.Name, parent: cst.CSTNode) -> bool:
        """Stores, parameters, attribute names and keyword names are not uses."""
        if isinstance(parent, (cst.Param, cst.AssignTarget, cst.Attribute)) and not (
            isinstance(parent, cst.Attribute) and parent.value is node
        ):
            return True
        if isinstance(parent, cst.Arg) and parent.keyword is node:
            return True
        if isinstance(parent, (cst.For, cst.CompFor)) and parent.target is node:
            return True
        if isinstance(parent, (cst.Element, cst.Tuple, cst.List)):
            # inside an assignment target: a, x = ...
            holder = parent
            while isinstance(holder, (cst.Element, cst.Tuple, cst.List)):
                holder = self.parent(holder)
            if isinstance(holder, (cst.For, cst.CompFor)):
                return self._inside(node, holder.target)
            return isinstance(holder, cst.AssignTarget)
        return False

    def _inside(self, node: cst.CSTNode, ancestor: cst.CSTNode) -> bool:
        while node is not None:
            if node is ancestor:
                return True
            node = self.parent(node)
        return False

    def classify(self, node: cst.Name, parent: cst.CSTNode) -> tuple[str, cst.CSTNode]:
        if isinstance(parent, cst.Attribute):
            return "api", parent
        if isinstance(parent, cst.Comparison) or isinstance(parent, cst.ComparisonTarget):
            comparison = parent if isinstance(parent, cst.Comparison) else self.parent(parent)
            if all(
                isinstance(t.operator, (cst.Is, cst.IsNot, cst.Equal, cst.NotEqual))
                and (_is_none(t.comparator) or _is_none(comparison.left))
                for t in comparison.comparisons
            ):
                return "check", comparison
            return "legacy", comparison
        if self._is_truth_test(node, parent):
            # `if past:`, `past and ...`, `not past`: a Cache has a length (its layers), so it tests like a tuple
            return "check", parent
        if isinstance(parent, cst.Arg):
            call = self.parent(parent)
            func = call.func if isinstance(call, cst.Call) else None
            if isinstance(func, cst.Name) and func.value in CONSUMING_BUILTINS:
                return "legacy", call
            if isinstance(func, cst.Name) and func.value in CHECKING_BUILTINS:
                return "check", call
            return "pass", call
        if isinstance(parent, cst.Element) and self._concatenated(parent):
            # `torch.cat((layer_past, key_value), dim=-2)`: the past is one tensor (K and V fused, or stacked)
            return "legacy", self.parent(self.parent(self.parent(parent)))
        if isinstance(parent, (cst.Return, cst.DictElement, cst.Element)) and not isinstance(
            self.parent(parent), (cst.Subscript,)
        ):
            if isinstance(parent, cst.Element):
                return "pass", self.parent(parent)
            return "pass", parent
        if isinstance(parent, cst.IfExp) and parent.test is not node:
            holder = self.parent(parent)
            if isinstance(holder, cst.Assign) and isinstance(holder.targets[0].target, cst.Name):
                return "alias", holder
            return "pass", parent
        if isinstance(parent, cst.Assign) and parent.value is node:
            if all(isinstance(t.target, cst.Name) for t in parent.targets):
                return "alias", parent
            return "legacy", parent  # unpacking: a, b = cache
        if isinstance(parent, cst.Element) or isinstance(parent, cst.Tuple):
            return "pass", parent
        return "legacy", parent

    def _concatenated(self, element: cst.Element) -> bool:
        """``element`` is one of the tensors ``torch.cat``/``concat``/``stack`` joins."""
        sequence = self.parent(element)
        arg = self.parent(sequence) if isinstance(sequence, (cst.Tuple, cst.List)) else None
        call = self.parent(arg) if isinstance(arg, cst.Arg) and arg.keyword is None else None
        joins = m.Name("cat") | m.Name("concat") | m.Name("concatenate") | m.Name("stack")
        return (
            isinstance(call, cst.Call)
            and call.args[0] is arg
            and m.matches(call.func, m.Attribute(value=m.Name("torch"), attr=joins))
        )

    def _is_truth_test(self, node: cst.Name, parent: cst.CSTNode) -> bool:
        if isinstance(parent, (cst.If, cst.While, cst.IfExp)) and parent.test is node:
            return True
        if isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not):
            return True
        if isinstance(parent, cst.BooleanOperation):
            if parent.left is node:
                return True
            holder = self.parent(parent)  # the right operand is a truth test only where the whole is one
            return self._is_truth_test(parent, holder) if holder is not None else False
        return False

    def _part_targets(self, context: cst.CSTNode) -> list[str]:
        """``part = C[:2] if C is not None else None`` (or ``part = C[-2:]``): a slice of a layer's past is a part
        of the cache (its self- or cross-attention half), handed on like the cache itself."""
        if not (isinstance(context, cst.Subscript) and any(isinstance(e.slice, cst.Slice) for e in context.slice)):
            return []
        holder = self.parent(context)
        if isinstance(holder, cst.IfExp) and holder.body is context:
            holder = self.parent(holder)
        if isinstance(holder, cst.Assign) and holder.value in (context, self.parent(context)):
            return self._alias_targets(context, holder)
        return []

    def _alias_targets(self, node: cst.Name, assign: cst.CSTNode) -> list[str]:
        if not isinstance(assign, cst.Assign):
            return []
        targets = []
        for target in assign.targets:
            if isinstance(target.target, cst.Name):
                targets.append(target.target.value)
        return targets


def tuple_aliases(function: cst.FunctionDef, names: set[str]) -> None:
    """``block, layer = self.h[i], past_key_values`` binds ``layer`` to the cache (added to ``names``): the
    assignments in code order, a :func:`findall` (below the original nodes, a slice of its index, not a walk)."""
    for node in findall(function, m.Assign()):
        for target in node.targets:
            if isinstance(target.target, cst.Tuple) and isinstance(node.value, cst.Tuple):
                pairs = zip(target.target.elements, node.value.elements)
                for left, right in pairs:
                    if (
                        isinstance(left.value, cst.Name)
                        and isinstance(right.value, cst.Name)
                        and right.value.value in names
                    ):
                        names.add(left.value.value)


def _rebinds_to_tuple(stmt: cst.BaseStatement, name: str) -> bool:
    """``name = (a, b)``, or an ``if``/``else`` whose every branch ends so (no other assignment to ``name``
    after it in the branch)."""
    if isinstance(stmt, cst.SimpleStatementLine):
        return any(
            m.matches(small, m.Assign(targets=[m.AssignTarget(m.Name(name))], value=m.Tuple() | m.List()))
            for small in stmt.body
        )
    if isinstance(stmt, cst.If):
        orelse = stmt.orelse
        if orelse is None:
            return False
        rest = orelse if isinstance(orelse, cst.If) else orelse.body.body
        branches = [stmt.body.body, rest]
        for branch in branches:
            if isinstance(branch, cst.If):
                if not _rebinds_to_tuple(branch, name):
                    return False
                continue
            last = next((i for i in reversed(range(len(branch))) if _assigns_name(branch[i], name)), None)
            if last is None or not _rebinds_to_tuple(branch[last], name):
                return False
        return True
    return False


def _assigns_name(stmt: cst.CSTNode, name: str) -> bool:
    return bool(findall(stmt, m.AssignTarget(m.Name(name)) | m.AugAssign(target=m.Name(name))))


def _disjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The operands of an ``or`` chain (``a or b or c``), or the test itself."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
        return _disjuncts(test.left) + _disjuncts(test.right)
    return [test]


def _conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The operands of an ``and`` chain (``a and b and c``), or the test itself."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _conjuncts(test.left) + _conjuncts(test.right)
    return [test]
