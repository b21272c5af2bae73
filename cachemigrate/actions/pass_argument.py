"""``pass_argument``: hand a new parameter on to the calls of another role, e.g. ``cache_position`` from the
block to its attention.

A call is one of the target role's when it passes the target's cache parameter by keyword and calls either a
submodule built from the target role (``self.attn(..., layer_past=layer_past)``) or a local variable (``block(...)``
in the layer loop), never a module-level name such as an output class: it gains ``name=name``. A positional gradient-checkpointing call
(``self._gradient_checkpointing_func(block.__call__, a, b, ...)``) gains ``name`` positionally, but only when it
already passes every parameter of the target's ``forward``; otherwise the argument would land in the wrong
place, and the rule reports it instead."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..views.patterns import code_of
from .base import Action, Planner
from .helpers import append_item, calls_role_module

_GC_CALL = m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name("_gradient_checkpointing_func")))


class PassArgument(Action):
    name = "pass_argument"
    PARAMS = {
        "name": (str, True, "the argument name (also the variable passed)"),
        "target_role": (str, True, "the role whose forward is called: attention, block or base_model"),
        "upstream_after_cache": (
            bool,
            False,
            "true if the target's parameter follows its cache parameter with --signature upstream",
        ),
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        check.choice("params.target_role", ("attention", "block", "base_model"))

    def planner(self) -> Planner:
        return _Planner(self)


class _Planner(Planner):
    def __init__(self, action: PassArgument) -> None:
        super().__init__(action)
        info = action.ctx.info
        self.name = action.param("name")
        forwards = [info.classes[c].methods.get("forward") for c in info.roles[action.param("target_role")]]
        forwards = [f for f in forwards if f is not None]
        self.keywords = {p for f in forwards for p in f.cache_params}
        self.targets = set(info.roles[action.param("target_role")])
        # parameters of the target forward before the new one was added (without self)
        self.arity = {len([p for p in f.params if p not in ("self", self.name)]) for f in forwards}
        # where the new parameter sits in the target forward: last, or after the cache (--signature upstream)
        self.slot = None
        if self.ctx.options.get("signature") == "upstream" and action.param("upstream_after_cache"):
            slots = {
                [p for p in f.params if p != "self"].index(f.cache_params[0]) + 1 for f in forwards if f.cache_params
            }
            self.slot = slots.pop() if len(slots) == 1 else None

    def visit_Call(self, node: cst.Call) -> None:
        if not self.in_function_scope() or any(
            a.keyword is not None and a.keyword.value == self.name for a in node.args
        ):
            return
        name = self.name
        equal = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
        if calls_role_module(self.ctx, self.current_class, node.func, self.targets) and any(
            a.keyword is not None and a.keyword.value in self.keywords for a in node.args
        ):
            self.action.changes += 1
            arg = cst.Arg(cst.Name(name), keyword=cst.Name(name), equal=equal)
            self.replace(
                node,
                lambda updated, _: updated.with_changes(
                    args=append_item(list(updated.args), arg, "whitespace_after_arg")
                ),
                reformat=True,
            )
            return
        if m.matches(node, _GC_CALL) and all(a.keyword is None for a in node.args):
            if any(m.matches(a.value, m.Name(name)) for a in node.args):
                return  # already passed positionally (a second run changes nothing)
            positional = len(node.args) - 1  # the first argument is the callable
            if positional in self.arity:
                self.action.changes += 1
                slot = self.slot

                def build(updated, _resolve):
                    arg = cst.Arg(cst.Name(name))
                    args = list(updated.args)
                    if slot is not None:
                        index = slot + 1  # after the callable
                        arg = arg.with_changes(comma=args[index - 1].comma)
                        return updated.with_changes(args=[*args[:index], arg, *args[index:]])
                    return updated.with_changes(args=append_item(args, arg, "whitespace_after_arg"))

                self.replace(node, build, reformat=True)
                return
            self.ctx.error(
                self.action.rule,
                self.current_function,
                f"cannot pass `{name}` positionally in `{code_of(node.func)}(...)` in "
                f"{self.current_function}: it passes {positional} arguments, the called forward takes "
                f"{'/'.join(map(str, sorted(self.arity)))}; pass the arguments by keyword first",
            )
