"""``refuse_signature``: report a method the file overrides (a hook the runtime calls, scoped by the rule's
``functions``) whose parameters cannot take a call the era's runtime makes; the rule then refuses the file.

``calls`` lists the arguments the era's runtimes pass, positionally, one list per call shape (two where the era
spans a release that changed the hook): a method is refused when one of them would not bind (too many required
parameters, or too few without ``*args``). For a hook whose signature the runtime changed under the file: GPTBigCode
4.51's ``_get_initial_cache_position(self, input_ids, model_kwargs)``, which transformers 4.57 calls as
``(seq_length, device, model_kwargs)``: migrated or not, such a file raises a TypeError in ``generate()`` there, and
no rewrite of its body changes that."""

from __future__ import annotations

import libcst as cst

from .base import Action, Planner


class RefuseSignature(Action):
    name = "refuse_signature"
    REFUSES = True
    PARAMS = {
        "calls": (list, True, "lists of the arguments the runtime passes, positionally, one list per call shape"),
        "message": (str, True, "what is wrong and what to do; may use {function}, {parameters} and {call}"),
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        calls = rule.params.get("calls")
        if not calls or not all(isinstance(c, list) and all(isinstance(a, str) for a in c) for c in calls):
            raise check.fail("params.calls", "a non-empty list of lists of argument names", calls)

    def planner(self) -> Planner:
        return _Planner(self)


def _binds(params: cst.Parameters, count: int) -> bool:
    """Whether ``count`` positional arguments (after ``self``) bind to ``params``."""
    positional = [*params.posonly_params, *params.params][1:]  # without self
    required = [p for p in positional if p.default is None]
    keyword_only_required = [p for p in params.kwonly_params if p.default is None]
    if keyword_only_required or count < len(required):
        return False
    return count <= len(positional) or isinstance(params.star_arg, cst.Param)


class _Planner(Planner):
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if len(self.function_stack) != 1 or not self.in_function_scope() or self.current_class is None:
            return
        action: RefuseSignature = self.action
        for call in action.param("calls"):
            if not _binds(node.params, len(call)):
                parameters = cst.Module(body=[]).code_for_node(node.params)
                message = action.param("message").format(
                    function=self.current_function, parameters=parameters, call=", ".join(call)
                )
                action.ctx.error(action.rule, self.current_function, message, node)
                return
