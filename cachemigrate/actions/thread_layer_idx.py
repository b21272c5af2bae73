"""``thread_layer_idx``: make every attention know its layer index, as ``cache.update(..., self.layer_idx)`` needs.

* attention ``__init__``: gains ``layer_idx=None`` (at the end) and stores ``self.layer_idx = layer_idx``;
* block ``__init__``: gains ``layer_idx=None`` and passes ``layer_idx=layer_idx`` to the attention it builds;
* base model ``__init__``: the ``nn.ModuleList([Block(...) for i in range(n)])`` passes ``layer_idx=i``
  (a ``_`` loop variable is renamed to ``layer_idx``).

Parts that already carry the index are left alone."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..patterns import code_of
from .add_parameter import add_parameter, has_parameter
from .base import Action, Scoped, append_item


class ThreadLayerIdx(Action):
    name = "thread_layer_idx"
    PARAMS = {"name": (str, False, 'the parameter name (default "layer_idx")')}

    def transformer(self) -> cst.CSTTransformer:
        return _Transformer(self)


def _with_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """``call`` with ``name=value`` appended, following the call's layout."""
    equal = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
    arg = cst.Arg(value=value, keyword=cst.Name(name), equal=equal)
    return call.with_changes(args=append_item(list(call.args), arg, "whitespace_after_arg"))


def _has_keyword(call: cst.Call, name: str) -> bool:
    return any(a.keyword is not None and a.keyword.value == name for a in call.args)


class _Transformer(Scoped):
    def __init__(self, action: ThreadLayerIdx) -> None:
        super().__init__(action)
        self.name = action.param("name", "layer_idx")
        roles = action.ctx.info.roles
        self.attention = set(roles["attention"])
        self.blocks = set(roles["block"])
        self.models = set(roles["base_model"])

    def _in_init(self, classes: set[str]) -> bool:
        return self.current_class in classes and self.current_function == f"{self.current_class}.__init__"

    def _callee(self, call: cst.Call) -> str:
        return code_of(call.func)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call):
        if self._in_init(self.blocks) and self._callee(updated_node) in self.attention:
            if not _has_keyword(updated_node, self.name):
                self.action.changes += 1
                self.mark_touched()
                return _with_keyword(updated_node, self.name, cst.Name(self.name))
        return updated_node

    def _comprehension(self, updated_node):
        if not self._in_init(self.models) or not isinstance(updated_node.elt, cst.Call):
            return updated_node
        call = updated_node.elt
        if self._callee(call) not in self.blocks or _has_keyword(call, self.name):
            return updated_node
        target = updated_node.for_in.target
        if not isinstance(target, cst.Name) or updated_node.for_in.inner_for_in is not None:
            self.action.ctx.error(
                self.action.rule,
                self.current_function,
                f"cannot pass `{self.name}` to {self._callee(call)}: its ModuleList loop target is not one name",
            )
            return updated_node
        self.action.changes += 1
        self.mark_touched()
        if target.value == "_":
            target = cst.Name(self.name)
            updated_node = updated_node.with_changes(for_in=updated_node.for_in.with_changes(target=target))
        return updated_node.with_changes(elt=_with_keyword(call, self.name, cst.Name(target.value)))

    def leave_ListComp(self, original_node, updated_node):
        return self._comprehension(updated_node)

    def leave_GeneratorExp(self, original_node, updated_node):
        return self._comprehension(updated_node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef):
        if len(self.function_stack) != 1 or not self._in_init(self.attention | self.blocks):
            return updated_node
        if not has_parameter(updated_node.params, self.name):
            self.action.changes += 1
            updated_node = updated_node.with_changes(params=add_parameter(updated_node.params, self.name, "None"))
        if self.current_class in self.attention and not m.findall(
            updated_node, m.AssignTarget(m.Attribute(m.Name("self"), m.Name(self.name)))
        ):
            self.action.changes += 1
            store = cst.parse_statement(f"self.{self.name} = {self.name}\n")
            body = [*updated_node.body.body, store]
            updated_node = updated_node.with_changes(body=updated_node.body.with_changes(body=body))
        return updated_node
