"""``replace_expression``: rewrite an expression idiom, e.g. ``{cache}[0][0].size(-2)`` -> ``{cache}.get_seq_length()``."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..patterns import compile_expression, fill_expression, match_expression
from .base import CACHE_GUARD, Action, Scoped, check_templates, rule_templates


class ReplaceExpression(Action):
    name = "replace_expression"
    PARAMS = {
        "pattern": (str, False, 'an expression template, e.g. "{cache}[0][0].size(-2)"'),
        "patterns": (list, False, "a list of expression templates"),
        "replacement": (str, True, "an expression template using the pattern's holes"),
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        check_templates(rule, check, compile_expression, "expression")

    def __init__(self, rule, ctx) -> None:
        super().__init__(rule, ctx)
        self.patterns = [compile_expression(t) for t in rule_templates(rule)]
        self.types = {type(p.matchers[0]).__name__ for p in self.patterns}

    def transformer(self) -> cst.CSTTransformer:
        return _Transformer(self)


class _Transformer(Scoped):
    """Rewrites matching expressions, except in the tuple branch of ``a if isinstance(x, Cache) else b``: that
    code is already guarded (a second run must not wrap its own output again)."""

    def __init__(self, action: "ReplaceExpression") -> None:
        super().__init__(action)
        self.guarded: set[int] = set()

    def on_visit(self, node):
        if id(node) in self.guarded:
            return False
        if isinstance(node, cst.IfExp) and m.matches(node.test, CACHE_GUARD):
            self.guarded.add(id(node.orelse))
        return super().on_visit(node)

    def on_leave(self, original_node, updated_node):
        result = super().on_leave(original_node, updated_node)
        action: ReplaceExpression = self.action
        if (
            id(original_node) not in self.guarded
            and isinstance(result, cst.BaseExpression)
            and type(result).__name__ in action.types
            and self.in_function_scope()
        ):
            bound = self.bound()
            for pattern in action.patterns:
                captures = match_expression(pattern, result, bound)
                if captures is not None:
                    action.changes += 1
                    self.mark_touched()
                    values = {**{k: v for k, v in bound.items()}, **captures}
                    new = fill_expression(action.rule.params["replacement"], values)
                    return new.with_changes(lpar=result.lpar, rpar=result.rpar) if result.lpar else new
        return result
