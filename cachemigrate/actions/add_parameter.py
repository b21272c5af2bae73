"""``add_parameter``: add a keyword parameter with a default at the END of a signature, so that positional
callers keep working. Skipped where the parameter exists, or (``unless_var_kwargs``) where ``**kwargs``
already takes it."""

from __future__ import annotations

import libcst as cst

from ..patterns import TemplateError, parse_expression
from .base import Action, Scoped, append_item

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

    def transformer(self) -> cst.CSTTransformer:
        return _Transformer(self)


def add_parameter(
    params: cst.Parameters, name: str, default: str, annotation: str | None = None, after: str | None = None
) -> cst.Parameters:
    """``params`` with ``name=default`` appended after the last positional-or-keyword parameter (as a
    keyword-only one when the function takes ``*args``), or right after the parameter ``after``."""
    spaces = " " if annotation else ""
    param = cst.Param(
        cst.Name(name),
        annotation=cst.Annotation(cst.parse_expression(annotation)) if annotation else None,
        default=cst.parse_expression(default),
        equal=cst.AssignEqual(cst.SimpleWhitespace(spaces), cst.SimpleWhitespace(spaces)),
    )
    names = [p.name.value for p in params.params]
    if after in names:
        index = names.index(after) + 1
        param = param.with_changes(comma=params.params[index - 1].comma)
        return params.with_changes(params=[*params.params[:index], param, *params.params[index:]])
    if isinstance(params.star_arg, cst.Param):
        return params.with_changes(kwonly_params=append_item(list(params.kwonly_params), param, _AFTER))
    return params.with_changes(params=append_item(list(params.params), param, _AFTER))


def has_parameter(params: cst.Parameters, name: str) -> bool:
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    return any(p.name.value == name for p in every)


class _Transformer(Scoped):
    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef):
        if len(self.function_stack) != 1 or not self.in_function_scope():
            return updated_node
        action: AddParameter = self.action
        params = updated_node.params
        if has_parameter(params, action.param("name")):
            return updated_node
        if action.param("unless_var_kwargs") and isinstance(params.star_kwarg, cst.Param):
            return updated_node
        action.changes += 1
        after = None
        if action.param("upstream_after_cache") and self.ctx.options.get("signature") == "upstream":
            after = self.bound().get("cache")
        new = add_parameter(params, action.param("name"), action.param("default"), action.param("annotation"), after)
        return updated_node.with_changes(params=new)
