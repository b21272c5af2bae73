"""``replace_expression``: rewrite an expression idiom, e.g. ``{cache}[0][0].size(-2)`` -> ``{cache}.get_seq_length()``."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..patterns import compile_expression, fill_expression, match_expression
from .base import Action, Planner, captured_nodes
from .helpers import CACHE_GUARD, check_templates, rule_templates


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

    def planner(self) -> Planner:
        return _Planner(self)


class _Planner(Planner):
    """Plans the rewrite of matching expressions (the outermost match wins), except in the tuple branch of
    ``a if isinstance(x, Cache) else b``: that code is already guarded (a second run must not wrap its own
    output again)."""

    def __init__(self, action: ReplaceExpression) -> None:
        super().__init__(action)
        self.guarded: set[cst.CSTNode] = set()  # original nodes, alive for the whole plan

    def on_visit(self, node) -> bool:
        if not super().on_visit(node) or node in self.guarded:
            return False
        if isinstance(node, cst.IfExp) and m.matches(node.test, CACHE_GUARD):
            self.guarded.add(node.orelse)
        if not isinstance(node, cst.BaseExpression) or not self.in_function_scope():
            return True
        action: ReplaceExpression = self.action
        view = self.view(node)
        if type(view).__name__ not in action.types:
            return True
        bound = self.bound()
        for pattern in action.patterns:
            captures = match_expression(pattern, view, bound)
            if captures is None:
                continue
            action.changes += 1
            replacement = action.rule.params["replacement"]

            def build(updated, resolve, captures=captures, bound=bound):
                new = fill_expression(replacement, {**bound, **resolve.values(captures)})
                return new.with_changes(lpar=updated.lpar, rpar=updated.rpar) if updated.lpar else new

            self.replace(node, build, captured_nodes(captures), reformat=True)
            return False
        return True
