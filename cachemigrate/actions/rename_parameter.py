"""``rename_parameter``: rename a cache parameter the way the human ports did, behind ``@deprecate_kwarg``.

In the role's functions the parameter and every use of it are renamed, its annotation set (if given), and
``@deprecate_kwarg(old, new_name=new, version=..., raise_if_both_names=True)`` added, so the old keyword keeps
working, is never swallowed by ``**kwargs``, and passing both names raises. Every call in the file that passes
``old=`` to one of the role's modules (``self.attn(...)``, the ``block(...)`` of the layer loop) passes
``new=`` instead. With ``old == new`` only the annotation changes."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..views.patterns import TemplateError, parse_expression
from ..edit.edits import Rename, Replace
from .base import Action, Planner
from .helpers import calls_role_module


class RenameParameter(Action):
    name = "rename_parameter"
    PARAMS = {
        "old": (str, True, "the current parameter name"),
        "new": (str, True, "the new parameter name"),
        "annotation": (str, False, "the new annotation, as Python"),
        "deprecate": (bool, False, "true to keep the old keyword working through @deprecate_kwarg"),
        "version": (str, False, "the version passed to @deprecate_kwarg (overridden by --deprecation-version)"),
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        if "annotation" in rule.params:
            try:
                parse_expression(rule.params["annotation"])
            except TemplateError as exc:
                raise check.fail("params.annotation", f"a Python expression ({exc})") from None
        if rule.params.get("deprecate") and "version" not in rule.params:
            raise check.fail("params.version", 'a version string such as "4.56.0" when `deprecate = true`')

    def planner(self) -> Planner:
        return _Planner(self)


def _uses_name(node: cst.FunctionDef, name: str) -> bool:
    """``name`` is a variable or parameter of the function (not just a keyword or an attribute name)."""
    return bool(_variable_names(node, name))


def _variable_names(node: cst.CSTNode, name: str) -> list[cst.Name]:
    """The ``Name`` nodes of ``name`` in ``node`` that are variables or parameters (not keywords, attributes)."""
    others = {a.keyword for a in m.findall(node, m.Arg(keyword=m.Name(name)))}
    others |= {a.attr for a in m.findall(node, m.Attribute(attr=m.Name(name)))}
    return [n for n in m.findall(node, m.Name(name)) if n not in others]


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _decorator(old: str, new: str, version: str) -> cst.Decorator:
    return cst.Decorator(
        cst.parse_expression(
            f'deprecate_kwarg("{old}", version="{version}", new_name="{new}", raise_if_both_names=True)'
        )
    )


class _Planner(Planner):
    VISIT_EVERYTHING = True  # call sites of the role's modules can be anywhere in the file

    def __init__(self, action: RenameParameter) -> None:
        super().__init__(action)
        self.old, self.new = action.param("old"), action.param("new")
        self.targets = set(action.ctx.classes)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if len(self.function_stack) != 1 or not self.in_function_scope():
            return
        params = node.params
        names = [p.name.value for p in params.params + params.kwonly_params]
        if self.old not in names:
            return
        action: RenameParameter = self.action
        if self.old != self.new and _uses_name(node, self.new):
            self.ctx.error(
                action.rule,
                self.current_function,
                f"cannot rename `{self.old}` to `{self.new}` in {self.current_function}: `{self.new}` is already "
                "used there",
            )
            return
        annotation = action.param("annotation")
        param = next(p for p in params.params + params.kwonly_params if p.name.value == self.old)
        annotated = annotation and (param.annotation is None or _code(param.annotation.annotation) != annotation)
        if self.old == self.new and not annotated:
            return  # the annotation was already there: nothing changes
        action.changes += 1
        if self.old != self.new:
            new = self.new
            for name in _variable_names(node, self.old):
                self.replace(name, lambda updated, _: updated.with_changes(value=new))
            # code other rules build in this function reads the new name too
            self.action.edits.append(Rename(action.rule.id, node, self.old, self.new, self.path_to(node)))
        if annotated:
            self.replace(
                node.params,
                lambda updated, _: updated,
                reformat=True,
            )
            self.replace(
                param,
                lambda updated, _: updated.with_changes(
                    annotation=cst.Annotation(cst.parse_expression(annotation)),
                    equal=cst.AssignEqual(cst.SimpleWhitespace(" "), cst.SimpleWhitespace(" ")),
                ),
            )
        if action.param("deprecate") and self.old != self.new:
            version = self.ctx.options.get("deprecation_version") or action.param("version")
            decorator = _decorator(self.old, self.new, version)
            self.action.edits.append(
                Replace(
                    action.rule.id,
                    node,
                    lambda updated, _: updated.with_changes(decorators=[*updated.decorators, decorator]),
                    self.path_to(node),
                    claim="header",
                )
            )

    def visit_Call(self, node: cst.Call) -> None:
        """A keyword in a call to one of the role's modules is renamed; other calls keep theirs."""
        if self.old == self.new or not calls_role_module(self.ctx, self.current_class, node.func, self.targets):
            return
        renamed = False
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == self.old:
                new = self.new
                self.replace(arg, lambda updated, _: updated.with_changes(keyword=cst.Name(new)))
                renamed = True
        self.action.changes += renamed
