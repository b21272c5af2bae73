"""``drop_override``: remove an override of a GenerationMixin hook (scoped by the rule's ``functions``) that computes
what the library's own hook computes once the past is a Cache: its only work of its own was reading the past's
length off the file's tuple layout, which after the migration is the Cache's ``get_seq_length()``, the length the
library's hook reads (:mod:`cachemigrate.facts.hook_override` proves the form; an override it cannot prove is left to
the other rules: CM313 guards it, CM314 refuses one the era's runtime cannot call).

For an era whose runtime calls the hook with other arguments than the file's override takes (4.57:
``(seq_length, device, model_kwargs)``), the override would raise a TypeError in generate(); without it the
library's hook runs, in every release of the era. A method this rule removes is in no later rule's scope
(:func:`cachemigrate.rules.planning.plan_rules`)."""

from __future__ import annotations

import libcst as cst

from ..edit.edits import Replace, remove
from ..facts.hook_override import replaced_by_library
from .base import Action


class DropOverride(Action):
    name = "drop_override"
    PARAMS = {
        "writes": (str, True, 'the key of its kwargs the hook sets, e.g. "cache_position"'),
        "past": (str, True, 'the key of its kwargs holding the past, e.g. "past_key_values"'),
        "embeds": (str, True, 'the key of its kwargs whose axis 1 is the input length where given: "inputs_embeds"'),
    }

    def __init__(self, rule, ctx) -> None:
        super().__init__(rule, ctx)
        self.found: dict[str, cst.FunctionDef] = {}
        for qualname in sorted(ctx.functions):
            fn = ctx.info.functions[qualname]
            node = fn.node
            owner = ctx.info.classes.get(fn.cls) if fn.cls else None
            if owner is None or node.decorators or qualname.count(".") != 1 or len(owner.methods) < 2:
                continue  # a method of a top-level class that keeps a body without it
            proved, _why = replaced_by_library(node, self.param("writes"), self.param("past"), self.param("embeds"))
            if proved:
                self.found[qualname] = node

    def drops(self) -> set[str]:
        """The methods this rule removes (out of every later rule's scope)."""
        return set(self.found)

    def plan(self, module: cst.Module) -> list:
        wanted = set(self.found.values())
        for stmt in module.body:
            if not isinstance(stmt, cst.ClassDef) or not isinstance(stmt.body, cst.IndentedBlock):
                continue
            for method in [s for s in stmt.body.body if s in wanted]:
                self.changes += 1
                self.edits.append(Replace(self.rule.id, method, remove, (module, stmt, stmt.body)))
        return self.edits
