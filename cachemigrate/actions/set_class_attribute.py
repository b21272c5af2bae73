"""``set_class_attribute``: set a class flag such as ``_supports_cache_class = True`` on the role's classes.

An existing assignment is updated in place; otherwise the flag goes after the last plain assignment at the
top of the class body (after the docstring)."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..views.patterns import TemplateError, code_of, parse_expression
from .base import Action, Planner


class SetClassAttribute(Action):
    name = "set_class_attribute"
    PARAMS = {
        "name": (str, True, "the attribute name"),
        "value": (str, True, 'the value as Python, e.g. "True"'),
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        try:
            parse_expression(rule.params["value"])
        except TemplateError as exc:
            raise check.fail("params.value", f"a Python expression ({exc})") from None

    def planner(self) -> Planner:
        return _Planner(self)


class _Planner(Planner):
    CLASS_LEVEL = True

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if self.function_stack or node.name.value not in self.ctx.classes:
            return
        action: SetClassAttribute = self.action
        name, value = action.param("name"), cst.parse_expression(action.param("value"))
        target = m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name(name))])])
        body = list(node.body.body)
        for stmt in body:
            if m.matches(stmt, target):
                if code_of(stmt.body[0].value) == code_of(value):
                    return
                action.changes += 1
                self.replace(stmt.body[0], lambda updated, _: updated.with_changes(value=value))
                return
        position = 0
        for index, stmt in enumerate(body):
            if m.matches(stmt, m.SimpleStatementLine(body=[m.Assign() | m.AnnAssign() | m.Expr(m.SimpleString())])):
                position = index + 1
            else:
                break
        action.changes += 1
        self.insert(
            node.body, position, [cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.Name(name))], value)])]
        )
