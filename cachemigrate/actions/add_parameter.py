"""``add_parameter``: add a keyword parameter with a default at the END of a signature, so that positional
callers keep working. Skipped where the parameter exists, or (``unless_var_kwargs``) where ``**kwargs``
already takes it."""

from __future__ import annotations

import libcst as cst

from ..views.patterns import TemplateError, parse_expression
from .base import Action, Planner
from .helpers import append_item

_AFTER = "whitespace_after_param"


class AddParameter(Action):
    name = "add_parameter"
    PARAMS = {
        "name": (str, True, "the parameter name"),
        "default": (str, True, 'the default value as Python, e.g. "None"'),
        "annotation": (str, False, "a type annotation as Python"),
        "unless_var_kwargs": (bool, False, "true to skip functions that take **kwargs"),
        "upstream_after_cache": (
            bool,
            False,
            "true to put the parameter right after the cache parameter with --signature upstream",
        ),
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        for key in ("default", "annotation"):
            if key in rule.params:
                try:
                    parse_expression(rule.params[key])
                except TemplateError as exc:
                    raise check.fail(f"params.{key}", f"a Python expression ({exc})") from None

    def planner(self) -> Planner:
        return _Planner(self)


def add_parameter(
    params: cst.Parameters, name: str, default: str, annotation: str | None = None, after: int | None = None
) -> cst.Parameters:
    """``params`` with ``name=default`` appended after the last positional-or-keyword parameter (as a
    keyword-only one when the function takes ``*args``), or right after the positional-or-keyword parameter
    number ``after`` (a position, so that it holds whatever other rules rename that parameter to)."""
    spaces = " " if annotation else ""
    param = cst.Param(
        cst.Name(name),
        annotation=cst.Annotation(cst.parse_expression(annotation)) if annotation else None,
        default=cst.parse_expression(default),
        equal=cst.AssignEqual(cst.SimpleWhitespace(spaces), cst.SimpleWhitespace(spaces)),
    )
    if after is not None and after < len(params.params):
        index = after + 1
        param = param.with_changes(comma=params.params[index - 1].comma)
        return params.with_changes(params=[*params.params[:index], param, *params.params[index:]])
    if isinstance(params.star_arg, cst.Param):
        return params.with_changes(kwonly_params=append_item(list(params.kwonly_params), param, _AFTER))
    return params.with_changes(params=append_item(list(params.params), param, _AFTER))


def has_parameter(params: cst.Parameters, name: str) -> bool:
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    return any(p.name.value == name for p in every)


class _Planner(Planner):
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if len(self.function_stack) != 1 or not self.in_function_scope():
            return
        action: AddParameter = self.action
        if has_parameter(node.params, action.param("name")):
            return
        if action.param("unless_var_kwargs") and isinstance(node.params.star_kwarg, cst.Param):
            return
        action.changes += 1
        after = None
        if action.param("upstream_after_cache") and self.ctx.options.get("signature") == "upstream":
            names = [p.name.value for p in node.params.params]
            cache = self.bound().get("cache")
            after = names.index(cache) if cache in names else None
        name, default, annotation = action.param("name"), action.param("default"), action.param("annotation")

        def build(updated, _resolve):
            if has_parameter(updated, name):  # another rule of this run added it already
                return updated
            return add_parameter(updated, name, default, annotation, after)

        self.replace(node.params, build, reformat=True)
