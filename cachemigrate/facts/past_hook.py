"""Generation hooks written before transformers 4.26: ``prepare_inputs_for_generation(self, input_ids, past=None,
...)`` that hands ``past`` on as ``{"past_key_values": past, ...}``. ``generate()`` passes the past as
``past_key_values`` since 4.26, so ``past`` is always None there and generation never reuses the cache. The
engine refuses such a file (:func:`cachemigrate.proof.first_step.past_hook_diagnostics`), or, with the explicit
option ``--fix-past-hook``, renames the parameter first (:mod:`cachemigrate.edit.past_hook`)."""

from __future__ import annotations

import dataclasses

import libcst as cst
import libcst.matchers as m

from ..traverse import findall
from .analysis import FunctionInfo, ModuleInfo

GENERATION_HOOKS = frozenset({"prepare_inputs_for_generation"})


@dataclasses.dataclass(frozen=True)
class PastHook:
    function: FunctionInfo
    parameter: cst.Param  # `past`


def past_hooks(info: ModuleInfo) -> list[PastHook]:
    """The hooks that take ``past`` (and no ``past_key_values``) and hand it on as ``"past_key_values": past``;
    a hook whose ``past`` goes elsewhere (a helper that reads ``past_key_values`` from ``**kwargs``) is none."""
    found = []
    for fn in info.functions.values():
        if fn.name not in GENERATION_HOOKS or "past" not in fn.params or "past_key_values" in fn.params:
            continue
        handed = [
            element
            for element in findall(fn.node, m.DictElement(key=m.SimpleString(), value=m.Name("past")))
            if element.key.evaluated_value == "past_key_values"
        ]
        if handed:
            found.append(PastHook(fn, next(p for p in fn.node.params.params if p.name.value == "past")))
    return found
