"""``add_method``: add a method, written as a template, to the role's classes (unless one of that name exists).
Used for the cache_position-based 4D mask builder of the static tier, and for ``PreTrainedModel`` methods that a
newer transformers removed (with ``if_used``: only in files that use one of the names, as ``self.get_head_mask``),
and for a default a newer transformers changed (with ``if_builds`` and ``only_bases``: a class that builds
``self.lm_head``, whose ancestry defines no such method, gets the 4.x default back; with ``if_defines`` and
``mentioning``: a class whose own ``prepare_inputs_for_generation`` handles ``position_ids`` itself opts out of the
ones 5.x's generate() makes)."""

from __future__ import annotations

import textwrap

import libcst as cst
import libcst.matchers as m

from .base import Action, Planner
from .helpers import ancestry
from ..traverse import findall


class AddMethod(Action):
    name = "add_method"
    PARAMS = {
        "template": (str, True, "the method, a `def` statement"),
        "if_used": (list, False, "attribute names: the method is added only to files that use one (`x.<name>`)"),
        "if_builds": (list, False, "attribute names: only classes whose own __init__ sets self.<name> qualify"),
        "only_bases": (
            list,
            False,
            "library bases: only classes whose ancestry outside the file is among these (the first one included), "
            "and whose ancestors in the file do not define the method, qualify",
        ),
        "if_defines": (list, False, "method names: only classes that define one themselves qualify"),
        "mentioning": (list, False, "names: with if_defines, only where that method's code names one of them"),
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        try:
            node = cst.parse_statement(textwrap.dedent(rule.params["template"]).strip() + "\n")
        except cst.ParserSyntaxError as exc:
            raise check.fail("params.template", f"a Python `def` ({exc.message})") from None
        if not isinstance(node, cst.FunctionDef):
            raise check.fail("params.template", "a single `def` statement")

    def planner(self) -> Planner:
        return _Planner(self)

    def prepare(self, module: cst.Module) -> bool:
        used = self.param("if_used")
        return not used or bool(findall(module, m.Attribute(attr=m.Name(m.MatchIfTrue(lambda value: value in used)))))

    def qualifies(self, name: str, method: str) -> bool:
        """Whether the class ``name`` passes ``if_builds`` and ``only_bases`` (both pass when not given)."""
        info = self.ctx.info
        defined = [info.classes[name].methods.get(own) for own in self.param("if_defines", [])]
        if self.param("if_defines") and not any(fn and _mentions(fn.node, self.param("mentioning")) for fn in defined):
            return False
        builds = self.param("if_builds")
        if builds and not any(attr in _built(info.classes[name]) for attr in builds):
            return False
        allowed = self.param("only_bases")
        if not allowed:
            return True
        ancestors, outside = ancestry(info, name)
        inherited = any(method in info.classes[a].methods for a in ancestors if a != name)
        return not inherited and allowed[0] in outside and outside <= set(allowed)


def _mentions(node: cst.FunctionDef, names) -> bool:
    """Whether ``node`` names one of ``names`` (every one when ``names`` is empty): as a variable, an attribute, a
    keyword argument or a string (``kwargs.get("position_ids")``)."""
    if not names:
        return True
    named = m.Name(m.MatchIfTrue(lambda value: value in names))
    text = m.SimpleString(m.MatchIfTrue(lambda value: value[1:-1] in names))
    return bool(findall(node, named | text))


def _built(cls) -> set[str]:
    return set(cls.submodules) | set(cls.module_lists) | set(cls.choices)


class _Planner(Planner):
    CLASS_LEVEL = True

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if self.function_stack or node.name.value not in self.ctx.classes:
            return
        code = self.ctx.format_statements(textwrap.dedent(self.action.param("template")).strip() + "\n", 1)
        method = cst.parse_statement(code)
        body = list(node.body.body)
        if any(isinstance(s, cst.FunctionDef) and s.name.value == method.name.value for s in body):
            return
        if not self.action.qualifies(node.name.value, method.name.value):
            return
        self.action.changes += 1
        method = method.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        self.insert(node.body, len(body), [method])
