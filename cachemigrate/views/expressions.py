"""The expression rewrites of a normalised view (:mod:`cachemigrate.views.normalize`): ``torch.cat``/``stack`` with a
tuple and a keyword ``dim`` (negative where the rank is known), ``x.shape[k]`` for every size spelling, ``is None``
comparisons, and the truth tests of a cache variable or of a flag that stands for one."""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

import libcst as cst
import libcst.matchers as m

from .ranks import RankScope, int_literal  # noqa: F401 (normalize reads it here)

CONCATENATE = frozenset({"cat", "concat", "concatenate", "stack"})


def rebuild(node: cst.CSTNode, rewrite: Callable[[cst.CSTNode], cst.CSTNode]) -> cst.CSTNode:
    """``node`` with ``rewrite`` applied bottom-up; subtrees it leaves alone are the original objects."""
    changes = {}
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        if isinstance(value, cst.CSTNode):
            new = rebuild(value, rewrite)
            if new is not value:
                changes[field.name] = new
        elif isinstance(value, (list, tuple)) and value and isinstance(value[0], cst.CSTNode):
            items = [rebuild(item, rewrite) if isinstance(item, cst.CSTNode) else item for item in value]
            if any(a is not b for a, b in zip(items, value)):
                changes[field.name] = type(value)(items)
    if changes:
        node = node.with_changes(**changes)
    return rewrite(node)


def _integer(value: int) -> cst.BaseExpression:
    if value < 0:
        return cst.UnaryOperation(cst.Minus(), cst.Integer(str(-value)))
    return cst.Integer(str(value))


def _is_none(node: cst.CSTNode) -> bool:
    return m.matches(node, m.Name("None"))


def _check(name: str, negate: bool) -> cst.Comparison:
    operator = cst.IsNot() if not negate else cst.Is()
    return cst.Comparison(cst.Name(name), [cst.ComparisonTarget(operator, cst.Name("None"))])


def merged_product(node: cst.CSTNode | None) -> cst.BinaryOperation | None:
    """The ``batch * heads`` of ``x.view(batch * heads, ...)`` (or ``reshape``, two sizes at least, none starred):
    a view merging ``x``'s two leading axes into one; None for any other expression."""
    if (
        m.matches(node, m.Call(func=m.Attribute(attr=m.Name("view") | m.Name("reshape"))))
        and len(node.args) >= 2
        and all(a.keyword is None and not a.star for a in node.args)
        and m.matches(node.args[0].value, m.BinaryOperation(operator=m.Multiply()))
    ):
        return node.args[0].value
    return None


class Expressions:
    """The expression rewrites of one function, given the ranks at the statement and the cache variables."""

    def __init__(self, caches: set[str], flags: Mapping[str, cst.BaseExpression], cache_rank: int | None) -> None:
        self.caches = caches
        self.flags = flags  # local name -> the cache test it was assigned once from
        self.cache_rank = cache_rank  # rank of one tensor of a layer's cache (C[0]), if the layout says
        self.scope: RankScope = RankScope()
        self.concatenated: list[int] = []  # ranks of what was concatenated onto a cache tensor (C[i])

    def rank(self, node: cst.BaseExpression) -> int | None:
        rank = self.scope.rank(node)
        if rank is not None or self.cache_rank is None:
            return rank
        # C[i] (a layer's tensor) and C[i][j] (the model's cache: layer i, tensor j)
        depth = 0
        while isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
            node, depth = node.value, depth + 1
        if isinstance(node, cst.Name) and node.value in self.caches and depth in (1, 2):
            return self.cache_rank
        return None

    def __call__(self, node: cst.CSTNode) -> cst.CSTNode:
        if isinstance(node, cst.Call):
            return self._call(node)
        if isinstance(node, cst.Subscript):
            return self._subscript(node)
        if isinstance(node, cst.Comparison):
            return self._comparison(node)
        if isinstance(node, cst.If):
            return node.with_changes(test=self.test(node.test))
        if isinstance(node, cst.While):
            return node.with_changes(test=self.test(node.test))
        if isinstance(node, cst.IfExp):
            return node.with_changes(test=self.test(node.test))
        if isinstance(node, cst.BooleanOperation):
            return node.with_changes(left=self.test(node.left), right=self.test(node.right))
        if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
            inner = node.expression
            if isinstance(inner, cst.Name) and inner.value in self.caches:
                return _check(inner.value, negate=True)
        return node

    def _cache_tensor(self, node: cst.BaseExpression) -> bool:
        """``C[i]`` for a cache variable ``C``: one tensor of a layer's cache."""
        return isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) and node.value.value in self.caches

    def _merged_cache_tensor(self, node: cst.BaseExpression) -> bool:
        """``C[i].view(batch * heads, ...)`` (or ``reshape``): one tensor of a layer's cache, its two leading axes
        merged."""
        return merged_product(node) is not None and self._cache_tensor(node.func.value)

    def test(self, node: cst.BaseExpression) -> cst.BaseExpression:
        """A test of truth: a cache variable (or a flag assigned from a cache test) means "is not None"."""
        if isinstance(node, cst.Name) and node.value in self.caches:
            return _check(node.value, negate=False)
        if isinstance(node, cst.Name) and node.value in self.flags:
            return self.flags[node.value]
        return node

    def _call(self, node: cst.Call) -> cst.CSTNode:
        func = node.func
        if m.matches(func, m.Attribute(value=m.Name("torch"), attr=m.Name())) and func.attr.value in CONCATENATE:
            return self._concatenate(node)
        if m.matches(func, m.Attribute(attr=m.Name("size"))) and len(node.args) == 1 and node.args[0].keyword is None:
            return self._shape(func.value, node.args[0].value)
        return node

    def _concatenate(self, node: cst.Call) -> cst.Call:
        func = node.func
        args = list(node.args)
        if not args or args[0].keyword is not None:
            return node
        sequence = args[0].value
        if isinstance(sequence, cst.List):
            sequence = cst.Tuple(elements=sequence.elements)
        dim = None
        rest = []
        for index, arg in enumerate(args[1:], 1):
            if (arg.keyword is None and index == 1) or (
                arg.keyword is not None and arg.keyword.value in ("dim", "axis")
            ):
                dim = arg.value
            else:
                rest.append(arg)
        name = "stack" if func.attr.value == "stack" else "cat"
        if dim is not None and isinstance(sequence, cst.Tuple):
            value = int_literal(dim)
            ranks = {self.rank(e.value) for e in sequence.elements} - {None}
            if ranks and any(self._cache_tensor(e.value) for e in sequence.elements):
                self.concatenated.extend(ranks)
            elif ranks and any(self._merged_cache_tensor(e.value) for e in sequence.elements):
                self.concatenated.extend(rank + 1 for rank in ranks)  # C[i] keeps the merged axes apart
            if value is not None and value >= 0 and len(ranks) == 1:
                rank = ranks.pop() + (1 if name == "stack" else 0)
                if value < rank:
                    dim = _integer(value - rank)
        new_args = [cst.Arg(sequence)]
        if dim is not None:
            new_args.append(cst.Arg(dim, keyword=cst.Name("dim")))
        return node.with_changes(func=func.with_changes(attr=cst.Name(name)), args=[*new_args, *rest])

    def _shape(self, tensor: cst.BaseExpression, index: cst.BaseExpression) -> cst.Subscript:
        value = int_literal(index)
        rank = self.rank(tensor)
        if value is not None and value >= 0 and rank is not None and value < rank:
            index = _integer(value - rank)
        return cst.Subscript(cst.Attribute(tensor, cst.Name("shape")), [cst.SubscriptElement(cst.Index(index))])

    def _subscript(self, node: cst.Subscript) -> cst.CSTNode:
        if len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
            return node
        index = node.slice[0].slice.value
        value = node.value
        if m.matches(value, m.Call(func=m.Attribute(attr=m.Name("size")), args=[])):
            return self._shape(value.func.value, index)
        if m.matches(value, m.Attribute(attr=m.Name("shape"))):
            number = int_literal(index)
            rank = self.rank(value.value)
            if number is not None and number >= 0 and rank is not None and number < rank:
                return node.with_changes(slice=[cst.SubscriptElement(cst.Index(_integer(number - rank)))])
        return node

    def _comparison(self, node: cst.Comparison) -> cst.CSTNode:
        if len(node.comparisons) != 1:
            return node
        target = node.comparisons[0]
        left, right = node.left, target.comparator
        if _is_none(left) and not _is_none(right):
            left, right = right, left
        if not _is_none(right):
            return node
        if isinstance(target.operator, (cst.NotEqual, cst.IsNot)):
            operator = cst.IsNot()
        elif isinstance(target.operator, (cst.Equal, cst.Is)):
            operator = cst.Is()
        else:
            return node
        if left is node.left and right is target.comparator and type(operator) is type(target.operator):
            return node
        return cst.Comparison(left, [cst.ComparisonTarget(operator, cst.Name("None"))])
