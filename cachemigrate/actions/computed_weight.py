"""``fill_computed_weight``: ``_init_weights``' empty branch for a module whose constructor computes its weight
computes it there too (CM460).

``elif isinstance(module, C): pass``, where ``C`` is a class of the file whose constructor computes ``self.weight``
through a static method of its own and whose weight a checkpoint does not hold (:mod:`..facts.computed_weights`),
becomes the rule's ``replacement`` with ``{module}`` (the name tested) and ``{method}`` (the constructor's method)
filled: the weight made again on real memory (the meta device's ``from_pretrained`` leaves none) and computed by
the constructor's own method. A branch that does anything but ``pass`` is the file's own and left alone."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..facts.computed_weights import computed_weights
from .base import Action, Planner
from .helpers import check_holes, filled_and_formatted

_ISINSTANCE = m.Call(func=m.Name("isinstance"), args=[m.Arg(m.Name(), keyword=None), m.Arg(m.Name(), keyword=None)])
_PASS_ONLY = m.IndentedBlock(body=[m.SimpleStatementLine(body=[m.Pass()])])


class FillComputedWeight(Action):
    name = "fill_computed_weight"
    PARAMS = {"replacement": (str, True, "statement template using {module} and {method}")}

    @classmethod
    def check_params(cls, rule, check) -> None:
        check_holes(check, "params.replacement", rule.params["replacement"], {"module", "method"})

    def prepare(self, module: cst.Module) -> bool:
        self.computed = computed_weights(module)
        return bool(self.computed)

    def planner(self) -> Planner:
        return _Planner(self)


class _Planner(Planner):
    def visit_If(self, node: cst.If) -> None:
        action: FillComputedWeight = self.action
        if not self.in_function_scope() or not m.matches(node.test, _ISINSTANCE):
            return
        tested, cls = (arg.value.value for arg in node.test.args)
        method = action.computed.get(cls)
        if method is None or not m.matches(node.body, _PASS_ONLY):
            return
        action.changes += 1
        values = {"module": cst.Name(tested), "method": cst.Name(method)}
        depth = self.depth + 1

        def build(updated, _resolve):
            return updated.with_changes(
                body=filled_and_formatted(action.ctx, action.param("replacement"), values, depth)
            )

        self.replace(node.body, build)
