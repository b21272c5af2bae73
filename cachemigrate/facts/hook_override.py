"""An override of a GenerationMixin hook that computes what the library's own hook computes, except for reading the
past's length off the file's tuple layout.

GPTBigCode 4.51 overrides ``_get_initial_cache_position(self, input_ids, model_kwargs)`` only because its legacy
past is not ``past[0][0].shape[2]``: it reads ``model_kwargs["past_key_values"][0].shape[1]`` (or ``[2]``) and sets
``model_kwargs["cache_position"] = torch.arange(past_length, cur_len, device=input_ids.device)``, ``cur_len`` the
length of ``model_kwargs["inputs_embeds"]`` where the call has them, else of ``input_ids``. GenerationMixin's own hook
(4.51: ``(input_ids, model_kwargs)``; 4.57: ``(seq_length, device, model_kwargs)``, ``seq_length`` the ids' length)
sets the same positions: ``arange(cur_len)[past_length:]``, ``past_length`` read from a Cache as
``get_seq_length()`` (0 without a past), ``cur_len`` the ``inputs_embeds``' length where the call has them (a
decoder-only model), else the ids'. Once the file is migrated the past generate() hands the hook is a Cache (a
tuple handed to generate() is converted before the hook is called), so the override's only own work, the layout read,
is the library's ``get_seq_length()``: the library's hook computes the same and the override can go.

:func:`replaced_by_library` proves that form, and nothing more: the body (its docstring aside) is assignments to
names and ``if`` statements whose tests read only ``"<key>" in kwargs`` or ``self.config.<attr>``, then
``kwargs[<writes>] = torch.arange(P, L, device=<inputs>.device)`` and ``return kwargs``; every value of ``P`` is 0
or a ``.shape[k]`` / ``.size(k)`` of ``kwargs[<past>]`` read under a test ``"<past>" in kwargs``; every value of
``L`` is ``<inputs>.shape[-1]`` / ``.shape[1]`` or ``kwargs[<embeds>].shape[1]`` under ``"<embeds>" in kwargs``. No
call other than the ``arange``, no other name, no other write."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..views.ranks import int_literal


def _string(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _key_of(node: cst.CSTNode, kwargs: str) -> str | None:
    """``kwargs["key"]`` -> "key"."""
    if m.matches(node, m.Subscript(value=m.Name(kwargs))) and len(node.slice) == 1:
        element = node.slice[0].slice
        if isinstance(element, cst.Index):
            return _string(element.value)
    return None


def _tested_key(test: cst.CSTNode, kwargs: str) -> str | None:
    """``"key" in kwargs`` -> "key"."""
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        if isinstance(target.operator, cst.In) and m.matches(target.comparator, m.Name(kwargs)):
            return _string(test.left)
    return None


def _reads_config(test: cst.CSTNode) -> bool:
    """``self.config.<attr>`` (``not`` of it too)."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test = test.expression
    return m.matches(test, m.Attribute(value=m.Attribute(value=m.Name("self"), attr=m.Name("config"))))


def _axis_read(node: cst.CSTNode) -> tuple[cst.CSTNode, int] | None:
    """``X.shape[k]`` / ``X.size(k)`` -> (X, k)."""
    if m.matches(node, m.Subscript(value=m.Attribute(attr=m.Name("shape")))) and len(node.slice) == 1:
        element = node.slice[0].slice
        axis = int_literal(element.value) if isinstance(element, cst.Index) else None
        return (node.value.value, axis) if axis is not None else None
    if m.matches(node, m.Call(func=m.Attribute(attr=m.Name("size")), args=[m.Arg(keyword=None)])):
        axis = int_literal(node.args[0].value)
        return (node.func.value, axis) if axis is not None else None
    return None


def _past_read(node: cst.CSTNode, kwargs: str, past: str) -> bool:
    """An axis of ``kwargs[past]`` read through integer indexing (``kwargs[past][0].shape[1]``)."""
    read = _axis_read(node)
    if read is None:
        return False
    base = read[0]
    while _key_of(base, kwargs) is None and isinstance(base, cst.Subscript) and len(base.slice) == 1:
        element = base.slice[0].slice
        if not isinstance(element, cst.Index) or int_literal(element.value) is None:
            return False
        base = base.value
    return _key_of(base, kwargs) == past


def _input_length(node: cst.CSTNode, inputs: str, kwargs: str, embeds: str, keys: set[str]) -> bool:
    read = _axis_read(node)
    if read is None:
        return False
    base, axis = read
    if m.matches(base, m.Name(inputs)):
        return axis in (-1, 1)
    return _key_of(base, kwargs) == embeds and axis == 1 and embeds in keys


def replaced_by_library(function: cst.FunctionDef, writes: str, past: str, embeds: str) -> tuple[bool, str]:
    """(whether ``function`` is GenerationMixin's own ``_get_initial_cache_position`` but for its read of the past's
    length, why not). See the module's docstring for the form proved."""
    params = function.params
    positional = [*params.posonly_params, *params.params]
    if params.star_arg != cst.MaybeSentinel.DEFAULT or params.star_kwarg or params.kwonly_params:
        return False, "it takes more than the hook's arguments"
    if len(positional) != 3 or any(p.default is not None for p in positional):
        return False, "it does not take (self, input_ids, model_kwargs)"
    inputs, kwargs = positional[1].name.value, positional[2].name.value
    body = list(function.body.body)
    if body and m.matches(body[0], m.SimpleStatementLine(body=[m.Expr(m.SimpleString())])):
        body = body[1:]
    if len(body) < 2 or not m.matches(body[-1], m.SimpleStatementLine(body=[m.Return(m.Name(kwargs))])):
        return False, f"it does not end with `return {kwargs}`"
    final = body[-2]
    arange = m.Call(func=m.Attribute(value=m.Name("torch"), attr=m.Name("arange")))
    if not (
        m.matches(final, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget()], value=arange)]))
        and _key_of(final.body[0].targets[0].target, kwargs) == writes
    ):
        return False, f"its last statement before the return is not `{kwargs}[{writes!r}] = torch.arange(...)`"
    call = final.body[0].value
    args = [a for a in call.args if a.keyword is None]
    devices = [a for a in call.args if a.keyword is not None]
    if len(args) != 2 or any(
        a.keyword.value != "device" or not m.matches(a.value, m.Attribute(m.Name(inputs), m.Name("device")))
        for a in devices
    ):
        return False, f"its `torch.arange` is not (past length, input length, device={inputs}.device)"
    values: dict[str, list[tuple[cst.CSTNode, set[str]]]] = {}
    why = _collect(body[:-2], kwargs, set(), values)
    if why:
        return False, why
    used = {a.value.value for a in args if isinstance(a.value, cst.Name)}
    if set(values) - used:
        return False, f"it assigns `{sorted(set(values) - used)[0]}`, which is neither of the positions' bounds"

    def each(node: cst.CSTNode, accepts) -> bool:
        if isinstance(node, cst.Name):
            found = values.get(node.value)
            return bool(found) and all(accepts(value, keys) for value, keys in found)
        return accepts(node, set())

    zero_or_past = lambda v, keys: int_literal(v) == 0 or (past in keys and _past_read(v, kwargs, past))  # noqa: E731
    if not each(args[0].value, zero_or_past):
        return False, f"its first position is not 0 or a length read off `{kwargs}[{past!r}]` under a test of it"
    length = lambda v, keys: _input_length(v, inputs, kwargs, embeds, keys)  # noqa: E731
    if not each(args[1].value, length):
        return False, f"its last position is not the length of `{inputs}` or of `{kwargs}[{embeds!r}]`"
    return True, ""


def _collect(statements, kwargs: str, keys: set[str], values: dict) -> str:
    """Record each name's assigned values with the keys tested present around them; why the statements are not of
    the form (empty: they are)."""
    for statement in statements:
        if isinstance(statement, cst.If):
            branch: cst.CSTNode | None = statement
            while isinstance(branch, cst.If):
                key = _tested_key(branch.test, kwargs)
                if key is None and not _reads_config(branch.test):
                    return "it tests something other than a key of its arguments or the config"
                why = _collect(branch.body.body, kwargs, keys | ({key} if key else set()), values)
                if why:
                    return why
                branch = branch.orelse
            if isinstance(branch, cst.Else):
                why = _collect(branch.body.body, kwargs, keys, values)
                if why:
                    return why
            continue
        if not m.matches(statement, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name())])])):
            return "it does more than assign names under tests"
        assign = statement.body[0]
        if m.findall(assign.value, m.Call()) and _axis_read(assign.value) is None:
            return "it calls something to compute a position"
        values.setdefault(assign.targets[0].target.value, []).append((assign.value, keys))
    return ""
