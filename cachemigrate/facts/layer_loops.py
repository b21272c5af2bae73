"""Loops over the layers by index: where ``past_key_values[i]`` is the past of the layer the loop runs.

A legacy past is a tuple (or list) with one entry per layer, in the order the model runs its layers; a loop that
runs layer ``i`` and hands it ``past[i]`` hands it its own past. With a Cache each attention updates its own layer
(``self.layer_idx``, the layer's position in the list), so ``past[i]`` becomes the whole cache. This holds only
where ``i`` is the position of the layer the loop runs, which the code shows in one of these ways:

* ``for i, layer in enumerate(self.layers):`` (the iterable is the layer list itself);
* ``for i in range(...):`` whose body takes ``self.layers[i]``, or calls an accessor of the class,
  ``self._get_layer(i)``, a method whose body is ``return self.layers[<its parameter>]``.

The index must be bound by that loop alone in the function (a name assigned elsewhere too could hold anything at
the read). Nothing here depends on the names: the layer list is the base model's ``nn.ModuleList`` of blocks.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..traverse import findall
from ..views.patterns import code_of
from .model import ClassInfo, FunctionInfo


def accessors(cls: ClassInfo, layers: str, positional: bool = True) -> set[str]:
    """``self.<name>`` of the methods of ``cls`` that return ``layers[<parameter>]`` and do nothing else (not
    ``positional``: ``layers[<any expression of the parameter>]``, a method that returns some layer)."""
    found = set()
    for name, method in cls.methods.items():
        params = [p for p in method.params if p not in ("self", "cls")]
        body = method.node.body.body
        if len(params) != 1 or len(body) != 1:
            continue
        returned = m.SimpleStatementLine(body=[m.Return(m.Subscript())])
        if not m.matches(body[0], returned):
            continue
        subscript = body[0].body[0].value
        if code_of(subscript.value) != layers:
            continue
        if _index_name(subscript) == params[0] or not positional and findall(subscript, m.Name(params[0])):
            found.add(f"self.{name}")
    return found


def _index_name(subscript: cst.Subscript) -> str | None:
    if len(subscript.slice) != 1 or not isinstance(subscript.slice[0].slice, cst.Index):
        return None
    value = subscript.slice[0].slice.value
    return value.value if isinstance(value, cst.Name) else None


def _is_call(node: cst.CSTNode, func: str) -> bool:
    return isinstance(node, cst.Call) and code_of(node.func) == func


def loop_index(loop: cst.For, layers: str, getters: set[str] = frozenset()) -> str | None:
    """The name that is the position of the layer ``loop`` runs, if the loop shows it (see the module)."""
    target, iterable = loop.target, loop.iter
    if _is_call(iterable, "enumerate") and iterable.args and code_of(iterable.args[0].value) == layers:
        if isinstance(target, cst.Tuple) and len(target.elements) == 2:
            first = target.elements[0].value
            return first.value if isinstance(first, cst.Name) else None
        return None
    if not (_is_call(iterable, "range") and isinstance(target, cst.Name)):
        return None
    index = target.value
    for node in findall(loop.body, m.Subscript()):
        if code_of(node.value) == layers and _index_name(node) == index:
            return index
    for node in findall(loop.body, m.Call()):
        if code_of(node.func) in getters and len(node.args) == 1 and m.matches(node.args[0].value, m.Name(index)):
            return index
    return None


def _bindings(function: cst.FunctionDef, name: str) -> int:
    binders = findall(function.body, m.AssignTarget() | m.AugAssign() | m.AnnAssign() | m.For() | m.NamedExpr())
    count = sum(1 for b in binders if findall(b.target, m.Name(name)))
    count += sum(1 for c in findall(function.body, m.CompFor()) if findall(c.target, m.Name(name)))
    params = function.params
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    return count + sum(1 for p in every if p.name.value == name)


def layer_loops(function: cst.FunctionDef, layers: str, getters: set[str] = frozenset()) -> dict[cst.For, str]:
    """The loops of ``function`` over the layers by index, each with its index (bound by that loop alone)."""
    found = {}
    for loop in findall(function.body, m.For()):
        index = loop_index(loop, layers, getters)
        if index is not None and _bindings(function, index) == 1:
            found[loop] = index
    return found


def layer_indices(fn: FunctionInfo, cls: ClassInfo, layers: str) -> set[str]:
    """The names that are layer positions in ``fn`` (a method of ``cls``, which holds the layer list)."""
    return set(layer_loops(fn.node, layers, accessors(cls, layers)).values())
