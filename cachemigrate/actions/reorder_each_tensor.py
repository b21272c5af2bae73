"""``reorder_each_tensor``: a ``_reorder_cache`` that reorders each cached tensor with a function of its own
(:mod:`cachemigrate.facts.custom_reorder`: ``tuple(_reorder_stacked(state, beam_idx.to(state.device)) for state in
layer_past)``, a retrieval head decoding several stacked rows per beam) keeps its tuple code for tuples and, handed
a Cache, applies the same function to every key and value tensor of every layer of it, in place (the vendored
helper the template names walks a Cache's tensors on every release, an ``EncoderDecoderCache``'s two caches too).

The template is inserted before the top-level statement of the function that holds that comprehension (so that
the function it calls, defined above it, exists); ``{reorder}`` is the comprehension's element as a function of its
target (``lambda state: _reorder_stacked(state, beam_idx.to(state.device))``), ``{argN}`` the function's
parameters. A function this rule edits is in no later rule's scope (CM021's guard would reorder the Cache by rows:
:func:`cachemigrate.rules.planning.plan_rules`)."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..facts.custom_reorder import reorder_comprehension
from ..traverse import findall
from .base import Action, Planner
from .helpers import check_holes, depth_of, filled_and_formatted


class ReorderEachTensor(Action):
    name = "reorder_each_tensor"
    PARAMS = {"template": (str, True, "the statements to insert; `{reorder}`: the per-tensor function")}

    @classmethod
    def check_params(cls, rule, check) -> None:
        check_holes(check, "params.template", rule.params["template"], {"reorder"})

    def __init__(self, rule, ctx) -> None:
        super().__init__(rule, ctx)
        tops = {fn.name for fn in ctx.info.functions.values() if fn.cls is None}
        self.found: dict[str, cst.GeneratorExp] = {}
        for qualname in sorted(ctx.functions):
            comp = reorder_comprehension(ctx.info.functions[qualname].node, tops)
            if comp is not None:
                self.found[qualname] = comp

    def drops(self) -> set[str]:
        """The functions this rule rewrites: out of every later rule's scope (CM021's row-wise guard)."""
        return set(self.found)

    def planner(self) -> Planner:
        return _Planner(self)


class _Planner(Planner):
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        action: ReorderEachTensor = self.action
        comp = action.found.get(self.current_function)
        if comp is None or len(self.function_stack) != 1:
            return
        body = list(node.body.body)
        comps = m.GeneratorExp() | m.ListComp()
        index = next((i for i, stmt in enumerate(body) if any(c is comp for c in findall(stmt, comps))), None)
        if index is None:
            return
        code = cst.Module([]).code_for_node
        values = dict(self.bound())
        values["reorder"] = f"lambda {comp.for_in.target.value}: {code(comp.elt)}"
        new = filled_and_formatted(self.ctx, action.param("template"), values, depth_of(self.current_function))
        if any(stmt.deep_equals(new[0]) for stmt in body):
            return  # already there: a file migrated before
        action.changes += 1
        self.insert(node.body, index, new)
