"""``refuse_parameter``: report each function of the rule's role that takes one of ``parameters``; the rule then
refuses the file. For a contract the era's runtimes do not agree on: a function patched onto a library attention
written for the ``layer_past`` tuple contract is what releases of era 4.52 (4.51 among them) still call such a class
with, and a rewrite to the Cache contract would break it there."""

from __future__ import annotations

import libcst as cst

from .base import Action, Planner


class RefuseParameter(Action):
    name = "refuse_parameter"
    REFUSES = True
    PARAMS = {
        "parameters": (list, True, "parameter names: a function of the role that takes one is refused"),
        "message": (str, True, "what is wrong and what to do; may use {function} and {parameter}"),
    }

    def planner(self) -> Planner:
        return _Planner(self)


class _Planner(Planner):
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if len(self.function_stack) != 1 or not self.in_function_scope():
            return
        action: RefuseParameter = self.action
        params = node.params
        names = [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]
        for parameter in action.param("parameters"):
            if parameter in names:
                message = action.param("message").format(function=self.current_function, parameter=parameter)
                action.ctx.error(action.rule, self.current_function, message, node)
                return
