"""``add_method``: add a method, written as a template, to the role's classes (unless one of that name exists).
Used for the cache_position-based 4D mask builder of the static tier."""

from __future__ import annotations

import textwrap

import libcst as cst

from .base import Action, Planner


class AddMethod(Action):
    name = "add_method"
    PARAMS = {"template": (str, True, "the method, a `def` statement")}

    @classmethod
    def check_params(cls, rule, check) -> None:
        try:
            node = cst.parse_statement(textwrap.dedent(rule.params["template"]).strip() + "\n")
        except cst.ParserSyntaxError as exc:
            raise check.fail("params.template", f"a Python `def` ({exc.message})") from None
        if not isinstance(node, cst.FunctionDef):
            raise check.fail("params.template", "a single `def` statement")

    def planner(self) -> Planner:
        return _Planner(self)


class _Planner(Planner):
    CLASS_LEVEL = True

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if self.function_stack or node.name.value not in self.ctx.classes:
            return
        code = self.ctx.format_statements(textwrap.dedent(self.action.param("template")).strip() + "\n", 1)
        method = cst.parse_statement(code)
        body = list(node.body.body)
        if any(isinstance(s, cst.FunctionDef) and s.name.value == method.name.value for s in body):
            return
        self.action.changes += 1
        method = method.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        self.insert(node.body, len(body), [method])
