"""``rename_parameter``: rename a cache parameter the way the human ports did, behind ``@deprecate_kwarg``.

In the role's functions the parameter and every use of it are renamed, its annotation set (if given), and
``@deprecate_kwarg(old, new_name=new, version=..., raise_if_both_names=True)`` added, so the old keyword keeps
working, is never swallowed by ``**kwargs``, and passing both names raises. Every call in the file that passes
``old=`` to one of the role's modules (``self.attn(...)``, the ``block(...)`` of the layer loop) passes
``new=`` instead. With ``old == new`` only the annotation changes."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..patterns import TemplateError, parse_expression
from .base import Action, Scoped, calls_role_module


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

    def transformer(self) -> cst.CSTTransformer:
        return _Transformer(self)


def _uses_name(node: cst.FunctionDef, name: str) -> bool:
    """``name`` is a variable or parameter of the function (not just a keyword or an attribute name)."""
    keywords = {id(a.keyword) for a in m.findall(node, m.Arg(keyword=m.Name(name)))}
    attributes = {id(a.attr) for a in m.findall(node, m.Attribute(attr=m.Name(name)))}
    return any(id(n) not in keywords | attributes for n in m.findall(node, m.Name(name)))


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _decorator(old: str, new: str, version: str) -> cst.Decorator:
    return cst.Decorator(
        cst.parse_expression(
            f'deprecate_kwarg("{old}", version="{version}", new_name="{new}", raise_if_both_names=True)'
        )
    )


class _Transformer(Scoped):
    VISIT_EVERYTHING = True  # call sites of the role's modules can be anywhere in the file

    def __init__(self, action: RenameParameter) -> None:
        super().__init__(action)
        self.old, self.new = action.param("old"), action.param("new")
        self.targets = set(action.ctx.classes)
        self.clash = False
        self._call_targets_role = False
        self._stack: list[bool] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if len(self.function_stack) == 1 and self.in_function_scope() and self.old != self.new:
            self.clash = _uses_name(node, self.new)

    def _renaming(self) -> bool:
        return self.in_function_scope() and self.old != self.new and not self.clash

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name):
        if self._renaming() and updated_node.value == self.old:
            return updated_node.with_changes(value=self.new)
        return updated_node

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute):
        # `x.layer_past` is an attribute, not the parameter: undo a rename of the attribute name
        if self._renaming() and original_node.attr.value == self.old:
            return updated_node.with_changes(attr=original_node.attr)
        return updated_node

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg):
        # a keyword in a call: renamed when the call goes to one of the role's modules, kept otherwise
        if original_node.keyword is None or original_node.keyword.value != self.old:
            return updated_node
        keyword = cst.Name(self.new) if self._call_targets_role else original_node.keyword
        return updated_node.with_changes(keyword=keyword)

    def visit_Call(self, node: cst.Call) -> None:
        self._stack.append(self._call_targets_role)
        self._call_targets_role = calls_role_module(self.ctx, self.current_class, node.func, self.targets)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call):
        if (
            self._call_targets_role
            and self.old != self.new
            and any(a.keyword is not None and a.keyword.value == self.old for a in original_node.args)
        ):
            self.action.changes += 1
        self._call_targets_role = self._stack.pop()
        return updated_node

    def leave_Param(self, original_node: cst.Param, updated_node: cst.Param):
        if len(self.function_stack) != 1 or not self.in_function_scope() or original_node.name.value != self.old:
            return updated_node
        annotation = self.action.param("annotation")
        if annotation:
            updated_node = updated_node.with_changes(
                annotation=cst.Annotation(cst.parse_expression(annotation)),
                equal=cst.AssignEqual(cst.SimpleWhitespace(" "), cst.SimpleWhitespace(" ")),
            )
        return updated_node

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef):
        if len(self.function_stack) != 1 or not self.in_function_scope():
            return updated_node
        names = [p.name.value for p in original_node.params.params + original_node.params.kwonly_params]
        if self.old not in names:
            return updated_node
        if self.clash:
            self.ctx.error(
                self.action.rule,
                self.current_function,
                f"cannot rename `{self.old}` to `{self.new}` in {self.current_function}: `{self.new}` is already used there",
            )
            return updated_node
        if self.old == self.new and _code(updated_node.params) == _code(original_node.params):
            return updated_node  # the annotation was already there: nothing changed
        self.action.changes += 1
        if self.action.param("deprecate") and self.old != self.new:
            version = self.ctx.options.get("deprecation_version") or self.action.param("version")
            decorator = _decorator(self.old, self.new, version)
            updated_node = updated_node.with_changes(decorators=[*updated_node.decorators, decorator])
        return updated_node
