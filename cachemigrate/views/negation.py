"""The negation of a test, written the way a person would: what ``assert <test>, <message>`` raises on.

Releases before 4.12 wrote their checks as assertions (``assert len(past_key_value) == 2, "..."``); later ones as
``if len(past_key_value) != 2: raise ValueError("...")``. The two are one idiom: ``assert T, M`` is
``if not T: raise AssertionError(M)``. A rule written for the ``if`` reads an assertion through the negation of its
test (:func:`negated`), and what the rule writes for the raising condition goes back into the assertion negated
again (``not isinstance(c, Cache) and len(c) != 2`` -> ``isinstance(c, Cache) or len(c) == 2``).

:func:`negated` flips what flips exactly (``==``/``!=``, ``is``/``is not``, ``in``/``not in``, De Morgan over
``and``/``or``), drops a leading ``not``, and otherwise writes ``not (...)``. Order comparisons are not flipped
(``not a < b`` is not ``a >= b`` for NaN).
"""

from __future__ import annotations

import libcst as cst

_FLIPS = {
    cst.Equal: lambda op: cst.NotEqual(whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after),
    cst.NotEqual: lambda op: cst.Equal(whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after),
    cst.Is: lambda op: cst.IsNot(whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after),
    cst.IsNot: lambda op: cst.Is(whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after),
    cst.In: lambda op: cst.NotIn(whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after),
    cst.NotIn: lambda op: cst.In(whitespace_before=op.whitespace_before, whitespace_after=op.whitespace_after),
}


def _grouped(node: cst.BaseExpression) -> cst.BaseExpression:
    """``node`` in parentheses, unless it has its own."""
    if node.lpar:
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def negated(node: cst.BaseExpression) -> cst.BaseExpression:
    """An expression true exactly where ``node`` is false (its parentheses dropped: the caller adds what the
    place it goes needs)."""
    bare = node.with_changes(lpar=[], rpar=[]) if node.lpar else node
    if isinstance(bare, cst.UnaryOperation) and isinstance(bare.operator, cst.Not):
        inner = bare.expression
        return inner.with_changes(lpar=[], rpar=[]) if inner.lpar else inner
    if isinstance(bare, cst.Comparison) and len(bare.comparisons) == 1:
        target = bare.comparisons[0]
        flip = _FLIPS.get(type(target.operator))
        if flip is not None:
            return bare.with_changes(comparisons=[target.with_changes(operator=flip(target.operator))])
    if isinstance(bare, cst.BooleanOperation):
        if isinstance(bare.operator, cst.And):
            operator = cst.Or(whitespace_before=bare.operator.whitespace_before,
                              whitespace_after=bare.operator.whitespace_after)  # fmt: skip
            # `and` binds tighter than `or`: the negated operands need no parentheses
            return bare.with_changes(left=negated(bare.left), operator=operator, right=negated(bare.right))
        operator = cst.And(whitespace_before=bare.operator.whitespace_before,
                           whitespace_after=bare.operator.whitespace_after)  # fmt: skip
        left, right = negated(bare.left), negated(bare.right)
        # an operand that became `... or ...` keeps its grouping inside the `and`
        left = _grouped(left) if _is_or(left) else left
        right = _grouped(right) if _is_or(right) else right
        return bare.with_changes(left=left, operator=operator, right=right)
    return cst.UnaryOperation(operator=cst.Not(), expression=_grouped(bare) if _loose(bare) else bare)


def _is_or(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.Or) and not node.lpar


def _loose(node: cst.BaseExpression) -> bool:
    """An expression that binds more loosely than ``not``'s operand may: it needs parentheses after ``not``."""
    return isinstance(node, (cst.BooleanOperation, cst.IfExp, cst.Lambda, cst.NamedExpr))
