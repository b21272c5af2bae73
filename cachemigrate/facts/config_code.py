"""The model's code for an attribute an attention sets from its config: ``self.num_heads`` in the attention is
``self.config.num_attention_heads`` in the model (which holds the same config).

The attribute must be assigned once in the attention's ``__init__``, from an expression the model can evaluate the
same way: ``config.<name>`` chains (read ``self.config.<name>``), numbers, ``True``/``False``/``None``, other
attributes of the attention set that way (``self.multi_query = config.multi_query``), joined by operators and
conditional expressions (``config.n_head if not self.multi_query else 1``). Anything else (a call, a local, a
subscript, an attribute set from something else) is named as the reason.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..traverse import findall
from ..views.patterns import code_of

_OPERATIONS = (cst.IfExp, cst.UnaryOperation, cst.BooleanOperation, cst.Comparison, cst.BinaryOperation)
_PARTS = (
    cst.ComparisonTarget,
    cst.BaseUnaryOp,
    cst.BaseBinaryOp,
    cst.BaseBooleanOp,
    cst.BaseCompOp,
    cst.BaseParenthesizableWhitespace,
    cst.LeftParen,
    cst.RightParen,
)


class NotFromConfig(Exception):
    """Why the attribute cannot be read off the config in the model (said for users)."""


def model_code(init: cst.FunctionDef, code: str) -> str:
    """The model's code for ``code`` (``self.<name>``) of the attention whose ``__init__`` is ``init``; raises
    :class:`NotFromConfig`."""
    params = [p.name.value for p in init.params.params if p.name.value != "self"]
    if not params:
        raise NotFromConfig("the attention's `__init__` takes no config")
    return _attribute(init, params[0], code, frozenset())


def _attribute(init: cst.FunctionDef, config: str, code: str, seen: frozenset) -> str:
    if not code.startswith("self.") or "." in code[len("self.") :]:
        raise NotFromConfig(f"`{code}` is not an attribute of the attention")
    if code in seen:
        raise NotFromConfig(f"`{code}` is set from itself")
    every = [a for a in findall(init, m.AssignTarget(m.Attribute())) if code_of(a.target) == code]
    assigns = [
        s.body[0]
        for s in init.body.body
        if m.matches(s, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Attribute())])]))
        and code_of(s.body[0].targets[0].target) == code
    ]
    if not every:
        raise NotFromConfig(f"`{code}` is not set in the attention's `__init__`")
    if len(assigns) != 1 or len(every) != 1:
        raise NotFromConfig(f"`{code}` is set more than once, or inside a block, in the attention's `__init__`")
    value = assigns[0].value
    try:
        return _expression(init, config, value, seen | {code})
    except NotFromConfig as exc:
        if str(exc).startswith("`" + code + "`"):
            raise
        raise NotFromConfig(f"`{code}` is set from `{code_of(value)}`, and {exc}") from None


def _expression(init: cst.FunctionDef, config: str, node: cst.BaseExpression, seen: frozenset) -> str:
    if isinstance(node, cst.Attribute):
        chain = code_of(node)
        root = node
        while isinstance(root, cst.Attribute):
            root = root.value
        if isinstance(root, cst.Name) and root.value == config and not node.lpar:
            return "self.config." + chain[len(config) + 1 :]
        if isinstance(root, cst.Name) and root.value == "self":
            inner = _attribute(init, config, chain, seen)
            return inner if m.matches(cst.parse_expression(inner), m.Attribute()) else f"({inner})"
        raise NotFromConfig(f"`{chain}` is not read off the config")
    if isinstance(node, (cst.Integer, cst.Float)):
        return code_of(node)
    if isinstance(node, cst.Name):
        if node.value in ("True", "False", "None"):
            return node.value
        raise NotFromConfig(f"`{node.value}` is a name of the `__init__`, not the config")
    if not isinstance(node, _OPERATIONS):
        raise NotFromConfig(f"`{code_of(node)}` is not read off the config")
    replaced = {}
    for child in _operands(node):
        replaced[child] = cst.parse_expression(_expression(init, config, child, seen))
    return code_of(_Substitute(replaced).transform(node))


def _operands(node: cst.CSTNode) -> list[cst.BaseExpression]:
    """The outermost expressions under an operation that are not operations themselves."""
    found = []
    for child in node.children:
        if isinstance(child, _OPERATIONS):
            found.extend(_operands(child))
        elif isinstance(child, cst.ComparisonTarget):
            found.extend(_operands(child))
        elif isinstance(child, cst.BaseExpression):
            found.append(child)
        elif not isinstance(child, _PARTS):
            raise NotFromConfig(f"`{code_of(node)}` is not read off the config")
    return found


class _Substitute(cst.CSTTransformer):
    def __init__(self, replaced: dict) -> None:
        super().__init__()
        self.replaced = replaced

    def transform(self, node: cst.BaseExpression) -> cst.BaseExpression:
        return node.visit(self)

    def on_leave(self, original_node, updated_node):
        if original_node in self.replaced:
            return self.replaced[original_node]
        return updated_node
