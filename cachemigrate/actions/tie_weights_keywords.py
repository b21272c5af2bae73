"""``tie_weights_keywords``: a model's own ``tie_weights(self)`` (4.x called it with no arguments, and it replaced
4.x's tying) takes the keywords transformers 5.x calls it with from ``post_init`` and ``from_pretrained``
(``tie_weights(missing_keys=..., recompute_mapping=False)``), and first ties what 5.x's own ``tie_weights`` ties:
the ``_tied_weights_keys`` mappings of the model and of its sub-models (after loading, 5.x assigns each loaded
parameter anew, so a tie made while the model was built holds only if ``tie_weights`` makes it again). Then the
override's own code runs as it did on 4.x.

``parameters`` is the new parameter list after ``self``; ``template`` the statements put first in the body (after
its docstring): the call of 5.x's ``tie_weights`` (for ``portable``, only where the runtime has it: 4.x's takes no
arguments and ties what the override replaced).

An override that takes other parameters without defaults is reported: 5.x's call would not give them."""

from __future__ import annotations

import textwrap

import libcst as cst
import libcst.matchers as m

from .base import Action, Planner
from .tie_sources import TieSources

KEYWORDS = ("missing_keys", "recompute_mapping")


class TieWeightsKeywords(Action):
    name = "tie_weights_keywords"
    PARAMS = {
        "parameters": (str, True, "the parameters after `self`, as written in a `def`"),
        "template": (str, True, "the statements put first in the override's body"),
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        try:
            cst.parse_statement(f"def tie_weights(self, {rule.params['parameters']}):\n    pass\n")
        except cst.ParserSyntaxError as exc:
            raise check.fail("params.parameters", f"Python parameters ({exc.message})") from None
        try:
            cst.parse_module(textwrap.dedent(rule.params["template"]).strip() + "\n")
        except cst.ParserSyntaxError as exc:
            raise check.fail("params.template", f"Python statements ({exc.message})") from None

    def planner(self) -> Planner:
        return _Planner(self)

    def prepare(self, module: cst.Module) -> bool:
        self.sources = TieSources(module)
        return True


def takes_5x_call(function: cst.FunctionDef) -> bool:
    """Whether ``tie_weights`` takes 5.x's keywords (``missing_keys``, ``recompute_mapping``) or ``**kwargs``."""
    params = function.params
    names = {p.name.value for p in (*params.params, *params.kwonly_params)}
    return isinstance(params.star_kwarg, cst.Param) or set(KEYWORDS) <= names


class _Planner(Planner):
    CLASS_LEVEL = True

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if self.function_stack or len(self.class_stack) != 1 or node.name.value not in self.ctx.classes:
            return
        override = next((s for s in node.body.body if m.matches(s, m.FunctionDef(m.Name("tie_weights")))), None)
        if override is None or takes_5x_call(override) or not self.action.sources.is_pretrained(node.name.value):
            return
        params = override.params
        given = [*params.params, *params.kwonly_params]
        taken = {p.name.value for p in given}
        if (
            not params.params
            or params.params[0].name.value != "self"
            or any(p.default is None for p in given[1:])
            or params.star_arg is not cst.MaybeSentinel.DEFAULT
            or taken & set(KEYWORDS)
        ):
            self.ctx.error(
                self.action.rule,
                None,
                f"`{node.name.value}.tie_weights` overrides `PreTrainedModel.tie_weights` with parameters that "
                "transformers 5.x does not give: 5.x calls it as `tie_weights(missing_keys=..., "
                "recompute_mapping=False)` (from `post_init` and `from_pretrained`), so the file was left unchanged. "
                "Give every parameter after `self` a default and take `missing_keys=None, recompute_mapping=True`",
                node=override,
            )
            return
        self.action.changes += 1
        extra = cst.parse_statement(f"def tie_weights(self, {self.action.param('parameters')}):\n    pass\n").params
        last = params.params[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        new_params = params.with_changes(params=[*params.params[:-1], last, *extra.params[1:]])
        self.replace(params, lambda _updated, _r: new_params)
        body = list(override.body.body)
        first = 1 if body and m.matches(body[0], m.SimpleStatementLine([m.Expr(m.SimpleString())])) else 0
        code = self.ctx.format_statements(textwrap.dedent(self.action.param("template")).strip() + "\n", 2)
        template = cst.parse_module(code)
        statements = list(template.body)  # the template's first comments are the module's header: they lead it
        statements[0] = statements[0].with_changes(leading_lines=[*template.header, *statements[0].leading_lines])
        self.insert(override.body, first, statements)
