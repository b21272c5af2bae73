"""Dotted names as the code writes them: ``a.b.c`` of a chain of ``Name``/``Attribute`` nodes."""

from __future__ import annotations

import libcst as cst


def dotted(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` of a Name/Attribute chain, else None (a call, a subscript... anywhere in the chain)."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        inner = dotted(node.value)
        return f"{inner}.{node.attr.value}" if inner else None
    return None
