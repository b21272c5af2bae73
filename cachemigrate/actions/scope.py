"""``inside_if``: restrict a rule to code in the body of an ``if`` whose test requires given conditions.

The rule's ``inside_if`` is an expression template, e.g. ``"is_cross_attention and {cache} is not None"``. Code
is in scope when some enclosing ``if`` (or ``elif``) has it in its body (not in its ``else``) and every conjunct
of the template is a conjunct of that test, in the normalised view: ``past_key_value and ...`` and
``past_key_value is not None and ...`` both require ``{cache} is not None``. Extra conjuncts of the test (Bart's
``past_key_value[0].shape[2] == key_value_states.shape[1]``) do not matter: the branch still runs only when the
template's conditions hold.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import libcst as cst

from ..views.patterns import Pattern, TemplateError, compile_expression, match_expression

PARAM = (str, False, "an expression template: only rewrite code in the body of an `if` whose test has these conjuncts")


def _conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):  # (a and b) and c: a, b, c
        return _conjuncts(test.left) + _conjuncts(test.right)
    return [test.with_changes(lpar=(), rpar=())] if getattr(test, "lpar", None) else [test]


def compile_inside_if(template: str) -> list[Pattern]:
    """One expression pattern per conjunct of the template (each matched on its own)."""
    from ..views.patterns import code_of, parse_expression

    return [compile_expression(_template_of(code_of(part))) for part in _conjuncts(parse_expression(template))]


def _template_of(code: str) -> str:
    """Turn the hole identifiers of a parsed template back into ``{holes}``."""
    import re

    return re.sub(r"__cm_(\w+?)__", lambda mo: "{" + mo.group(1) + "}", code)


def check_inside_if(check, rule) -> None:
    if "inside_if" in rule.params:
        try:
            compile_inside_if(rule.params["inside_if"])
        except TemplateError as exc:
            raise check.fail("params.inside_if", f"a valid expression template ({exc})") from None


class IfScope:
    """Decides, from a planner's stack of original nodes, whether the current node is in scope."""

    def __init__(self, template: str | None) -> None:
        self.parts = compile_inside_if(template) if template else None

    def holds(self, stack: Sequence[cst.CSTNode], view, bound: Mapping[str, str]) -> bool:
        """``stack``: the module down to the node (inclusive); ``view``: original node -> its normalised view."""
        if self.parts is None:
            return True
        for index, node in enumerate(stack[:-1]):
            if isinstance(node, cst.If) and stack[index + 1] is node.body and self._requires(view(node), bound):
                return True
        return False

    def _requires(self, viewed_if: cst.If, bound: Mapping[str, str]) -> bool:
        tests = _conjuncts(viewed_if.test)
        return all(any(match_expression(part, test, bound) is not None for test in tests) for part in self.parts)
