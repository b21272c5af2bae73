"""A value a function binds with one of the ``patterns`` and passes to a call together with a keyword argument of
``keywords`` that is not ``None``:

``refuse_passed_with``: report the call; the rule then refuses the file. For a precondition of another rule that
no rewrite can keep.

``insert_after_passed_with``: insert the ``template`` right after the binding statement (its holes: the pattern's
captures, ``{keyword}`` the keyword passed). BigBird's layer gives the self-attention part of its past
(``self_attn_past_key_value = past_key_value[:2] ...``) to an attention it also gives ``encoder_hidden_states``:
an attention that picks its part of the cache by ``encoder_hidden_states is not None`` would read and write the
cross-attention part, so the value it is handed becomes a cache whose both parts are the self-attention part."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..views.patterns import TemplateError, code_of, compile_statements, match_statements
from .base import Action, Planner, captured_nodes
from .helpers import check_templates, filled_and_formatted, rule_templates
from ..traverse import findall


def passed_with(function: cst.CSTNode, value: str, keywords: set[str]) -> tuple[cst.Call, str] | None:
    """The first call of ``function`` that passes the name ``value`` as an argument together with a keyword
    argument of ``keywords`` that is not ``None``, and that keyword."""
    for call in findall(function, m.Call()):
        if not any(m.matches(a.value, m.Name(value)) for a in call.args):
            continue
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value in keywords and not m.matches(arg.value, m.Name("None")):
                return call, arg.keyword.value
    return None


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

    def found(self, planner: _Planner, block, views, index: int, end: int, captures: dict, call, keyword) -> None:
        """The statements ``views[index:end]`` of ``block`` bind the value ``call`` passes with ``keyword``."""
        message = self.param("message").format(call=code_of(call.func), value=captures["value"].value, keyword=keyword)
        self.ctx.error(self.rule, planner.current_function, message, call)


class InsertAfterPassedWith(RefusePassedWith):
    name = "insert_after_passed_with"
    REFUSES = False
    PARAMS = {
        "pattern": (str, False, "statement template binding the hole `{value}`"),
        "patterns": (list, False, "a list of statement templates binding the hole `{value}`"),
        "keywords": (list, True, "keyword arguments passed (other than `None`) with the value"),
        "template": (str, True, "statements inserted after the binding one; holes: the captures and {keyword}"),
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        super().check_params(rule, check)
        try:
            compile_statements(rule.params["template"])
        except TemplateError as exc:
            raise check.fail("params.template", f"a valid statement template ({exc})") from None

    def __init__(self, rule, ctx) -> None:
        super().__init__(rule, ctx)
        self.inserted = compile_statements(rule.params["template"])

    def found(self, planner: _Planner, block, views, index: int, end: int, captures: dict, call, keyword) -> None:
        statements = [view.node for view in views]
        if match_statements(self.inserted, statements, end, planner.bound()) is not None:
            return  # inserted already (a second run)
        run = views[index:end]
        index = run[0].start + sum(view.count for view in run)
        depth = planner.depth
        values = {**planner.bound(), **captures, "keyword": cst.Name(keyword)}
        template = self.param("template")
        ctx = self.ctx
        self.changes += 1

        def build(resolve):
            return filled_and_formatted(ctx, template, {**values, **resolve.values(captures)}, depth)

        planner.splice(block, index, 0, build, captured_nodes(captures))


class _Planner(Planner):
    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        if not self.in_function_scope():
            return
        action: RefusePassedWith = self.action
        views = self.block_view(node)
        statements = [view.node for view in views]
        bound = self.bound()
        function = self.ctx.info.functions[self.current_function].node
        keywords = set(action.param("keywords"))
        for index in range(len(statements)):
            for pattern in action.patterns:
                captures = match_statements(pattern, statements, index, bound)
                value = captures.get("value") if captures else None
                if not isinstance(value, cst.Name):
                    continue
                hit = passed_with(function, value.value, keywords)
                if hit is not None:
                    captures = {name: self.originals(v) for name, v in captures.items()}
                    action.found(self, node, views, index, index + len(pattern.matchers), captures, *hit)
                break
