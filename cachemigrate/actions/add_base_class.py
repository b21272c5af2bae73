"""``add_base_class``: add a base class to the role's classes that lack it, e.g. ``GenerationMixin`` on the
heads that could generate before (``PreTrainedModel`` stopped inheriting it in transformers 4.52).

A class qualifies when it defines one of ``if_methods`` or builds one of ``if_attributes`` in ``__init__``
(``self.lm_head = ...``); without either list, every class of the role does. The base goes last."""

from __future__ import annotations

import libcst as cst

from ..views.patterns import code_of
from .base import Action, Planner


class AddBaseClass(Action):
    name = "add_base_class"
    PARAMS = {
        "base": (str, True, "the base class, e.g. GenerationMixin"),
        "if_methods": (list, False, "method names: the class qualifies if it defines one"),
        "if_attributes": (list, False, "attribute names: the class qualifies if its __init__ sets self.<name>"),
    }

    def planner(self) -> Planner:
        return _Planner(self)

    def qualifies(self, name: str) -> bool:
        info = self.ctx.info.classes[name]
        methods, attributes = self.param("if_methods", []), self.param("if_attributes", [])
        if not methods and not attributes:
            return True
        return any(m in info.methods for m in methods) or any(a in info.submodules for a in attributes)


class _Planner(Planner):
    CLASS_LEVEL = True

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        name = node.name.value
        action: AddBaseClass = self.action
        if self.function_stack or name not in self.ctx.classes or not action.qualifies(name):
            return
        base = action.param("base")
        if any(code_of(arg.value) in (base, f"transformers.{base}") for arg in node.bases):
            return
        action.changes += 1

        def build(updated, _resolve):
            bases = list(updated.bases)
            arg = cst.Arg(cst.Name(base))
            if bases:
                last = bases[-1]
                comma = (
                    last.comma
                    if isinstance(last.comma, cst.Comma)
                    else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
                )
                bases[-1] = last.with_changes(comma=comma)
                if isinstance(last.comma, cst.Comma):  # a trailing comma: the new base takes one too
                    arg = arg.with_changes(comma=cst.Comma())
            return updated.with_changes(
                bases=bases + [arg], lpar=updated.lpar or cst.LeftParen(), rpar=updated.rpar or cst.RightParen()
            )

        self.action.edits.append(_header_edit(self, node, build))


def _header_edit(planner: Planner, node: cst.ClassDef, build):
    from ..edit.edits import Replace

    return Replace(planner.action.rule.id, node, build, planner.path_to(node), claim="header")
