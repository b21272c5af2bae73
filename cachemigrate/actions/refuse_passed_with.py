"""``refuse_passed_with``: report a call that passes a value the function binds with one of the ``patterns``
together with a keyword argument of ``keywords`` that is not ``None``; the rule then refuses the file.

For a precondition of another rule that no rewrite can keep: BigBird's layer gives the self-attention part of its
past (``self_attn_past_key_value = past_key_value[:2] ...``) to an attention it also gives
``encoder_hidden_states``; an attention that picks its part of the cache by ``encoder_hidden_states is not None``
would read and write the cross-attention part instead."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..views.patterns import code_of, compile_statements, match_statements
from .base import Action, Planner
from .helpers import check_templates, rule_templates


class RefusePassedWith(Action):
    name = "refuse_passed_with"
    REFUSES = True
    PARAMS = {
        "pattern": (str, False, "statement template binding the hole `{value}`"),
        "patterns": (list, False, "a list of statement templates binding the hole `{value}`"),
        "keywords": (list, True, "keyword arguments that must not be passed (other than `None`) with the value"),
        "message": (str, True, "what is wrong and what to do; may use {call}, {value} and {keyword}"),
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        check_templates(rule, check, compile_statements, "statement")
        if any("{value}" not in template for template in rule_templates(rule)):
            raise check.fail("params.patterns", "templates that bind the hole `{value}`")
        check.str_list("params.keywords")

    def __init__(self, rule, ctx) -> None:
        super().__init__(rule, ctx)
        self.patterns = [compile_statements(t) for t in rule_templates(rule)]

    def planner(self) -> Planner:
        return _Planner(self)


class _Planner(Planner):
    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        if not self.in_function_scope():
            return
        action: RefusePassedWith = self.action
        statements = [view.node for view in self.block_view(node)]
        bound = self.bound()
        for index in range(len(statements)):
            for pattern in action.patterns:
                captures = match_statements(pattern, statements, index, bound)
                value = captures.get("value") if captures else None
                if isinstance(value, cst.Name):
                    self._report_calls(value.value)
                    break

    def _report_calls(self, value: str) -> None:
        action: RefusePassedWith = self.action
        function = self.ctx.info.functions[self.current_function].node
        keywords = set(action.param("keywords"))
        for call in m.findall(function, m.Call()):
            if not any(m.matches(a.value, m.Name(value)) for a in call.args):
                continue
            for arg in call.args:
                if (
                    arg.keyword is not None
                    and arg.keyword.value in keywords
                    and not m.matches(arg.value, m.Name("None"))
                ):
                    message = action.param("message").format(
                        call=code_of(call.func), value=value, keyword=arg.keyword.value
                    )
                    action.ctx.error(action.rule, self.current_function, message, call)
                    return
