"""A past kept as one dict per layer, one entry per attention part (fairseq's incremental state, as FSMT and
fairseq-derived research code keep it), read off the code as facts.

The layout, as the code shows it::

    layer_state = past_key_values[idx] if past_key_values is not None else None   # the model picks one layer's dict
    ...
    class Attention(nn.Module):
        def __init__(self, ..., encoder_decoder_attention=False):
            self.cache_key = "encoder_decoder" if self.encoder_decoder_attention else "self"   # the part's key
        def forward(self, query, key, key_padding_mask=None, layer_state=None, ...):
            static_kv = self.encoder_decoder_attention                  # the cross part: written once, then reused
            saved_state = layer_state.get(self.cache_key, {})           # this attention's part
            if "prev_key" in saved_state and static_kv:
                key = None                                              # no projection once the part holds keys
            ...
            layer_state[self.cache_key] = {"prev_key": k.view(bsz, self.num_heads, -1, self.head_dim), ...}

What :func:`find` gives is the same roles an ``EncoderDecoderCache`` has: the self part and the cross part of
each layer (by the part's key), the keys and the values of each (by the fields' names, ``prev_key`` and
``prev_value``; their layout as stored and as read back), the switch that makes the cross part written once, the
other fields a part carries (``prev_key_padding_mask``), and the ``_reorder_cache`` that walks the dicts. Whether
those other fields are dead is :mod:`cachemigrate.facts.dict_proof`'s to prove.
"""

from __future__ import annotations

import dataclasses

import libcst as cst
import libcst.matchers as m

from ..traverse import findall
from .layout_types import TensorLayout
from .model import FunctionInfo, ModuleInfo


@dataclasses.dataclass(frozen=True)
class Field:
    """One entry of a part's dict: its name, its role (``key``, ``value`` or ``extra``), the value the attention
    writes, and for keys and values their layout as stored and as the attention reads them back."""

    name: str
    role: str
    written: cst.BaseExpression = dataclasses.field(repr=False, compare=False)
    element: cst.DictElement = dataclasses.field(repr=False, compare=False)
    stored: TensorLayout | None = None
    used: TensorLayout | None = None
    reads: tuple = dataclasses.field(default=(), repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class DictLayout:
    cache: str  # the model's cache variable (`past_key_values`)
    per_layer: str  # the name of one layer's dict (`layer_state`)
    pick: cst.CSTNode = dataclasses.field(repr=False, compare=False)  # `layer_state = past_key_values[idx] ...`
    attention: str = ""  # the class that reads and writes its part of the dict
    carrier: str = ""  # its parameter that holds the layer's dict
    part_key: str = ""  # the code of the part's key (`self.cache_key`, or a string)
    # "self" / "cross" -> the key of that part (the cross part: the one the written-once switch is on for; with a
    # switch but no such local, the parts are named by the switch: "`flag`" / "not `flag`")
    parts: dict = dataclasses.field(default_factory=dict)
    switch: str | None = None  # the attention's attribute that makes it the cross part (`encoder_decoder_attention`)
    static: str | None = None  # the forward's local set from it (`static_kv`)
    write: cst.Assign | None = dataclasses.field(default=None, repr=False, compare=False)
    saved: str | None = None  # the local the attention reads its part into (`saved_state`)
    fields: tuple = ()
    written_once: cst.If | None = dataclasses.field(default=None, repr=False, compare=False)
    reorder: str | None = None  # the function that reorders the dicts for beams (`X._reorder_cache`)
    forward: str = ""  # the attention's function that writes its part

    def field(self, role: str) -> Field | None:
        return next((f for f in self.fields if f.role == role), None)

    def extras(self) -> list[Field]:
        return [f for f in self.fields if f.role == "extra"]

    def legacy_order(self) -> tuple[tuple[str, str], ...] | None:
        """Where one layer's dict puts what the encoder-decoder family's 4-tuple holds, in its order (self keys,
        self values, cross keys, cross values: what ``EncoderDecoderCache.from_legacy_cache`` takes and
        ``to_legacy_cache`` gives): (part key, field name) each, so that ``layer[part][field]`` is the tensor. Only
        for keys and values stored [b, h, s, d] with a self and a cross part; None otherwise."""
        key, value = self.field("key"), self.field("value")
        standard = TensorLayout(4, -2, None)
        if set(self.parts) != {"self", "cross"} or key.stored != standard or value.stored != standard:
            return None
        return tuple((self.parts[part], field.name) for part in ("self", "cross") for field in (key, value))

    def accesses(self) -> list[tuple[str, str, cst.CSTNode]]:
        """The normalised view of the layout: each read and write of a part's field as (``read``/``write``, its
        role, the node): ``saved_state["prev_key"]`` is a read of the keys, ``"prev_value": v.view(...)`` in the
        part's dict a write of the values. The part is the attention's own (its key), the same in each."""
        found = []
        for f in self.fields:
            found.append(("write", f.role, f.element))
            found += [("read", f.role, node) for node in f.reads]
        return found


def _string(node: cst.CSTNode) -> str | None:
    return node.evaluated_value if isinstance(node, cst.SimpleString) else None


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _per_layer(module: cst.Module, cache: str) -> tuple[str, cst.CSTNode] | None:
    """``x = cache[i]`` or ``x = cache[i] if cache is not None else None``: the name and the statement."""
    picked = m.Subscript(value=m.Name(cache))
    for node in findall(
        module, m.Assign(targets=[m.AssignTarget(target=m.Name())], value=picked | m.IfExp(body=picked))
    ):
        return node.targets[0].target.value, node
    return None


def _part_write(fn: FunctionInfo) -> tuple[str, cst.Assign] | None:
    """``p[<key>] = {...}`` for a parameter ``p`` of ``fn``: the parameter and the statement."""
    for node in findall(
        fn.node, m.Assign(targets=[m.AssignTarget(target=m.Subscript(value=m.Name()))], value=m.Dict())
    ):
        name = node.targets[0].target.value.value
        if name in fn.params:
            return name, node
    return None


def _key_of(write: cst.Assign) -> cst.BaseExpression | None:
    target = write.targets[0].target
    if len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index):
        return target.slice[0].slice.value
    return None


def _parts(module: cst.Module, info: ModuleInfo, cls: str, key: cst.BaseExpression) -> tuple[dict, str | None]:
    """The part keys an attention writes under: ``self.k = "A" if self.flag else "B"`` in its ``__init__`` gives
    ``{True: "A", False: "B"}`` and the flag; a string key gives ``{None: key}``."""
    if _string(key) is not None:
        return {None: _string(key)}, None
    if not m.matches(key, m.Attribute(value=m.Name("self"), attr=m.Name())):
        return {}, None
    init = info.functions.get(f"{cls}.__init__")
    if init is None:
        return {}, None
    target = m.AssignTarget(target=m.Attribute(value=m.Name("self"), attr=m.Name(key.attr.value)))
    for node in findall(init.node, m.Assign(targets=[target], value=m.IfExp())):
        test, body, orelse = node.value.test, _string(node.value.body), _string(node.value.orelse)
        flag = test.attr.value if m.matches(test, m.Attribute(value=m.Name("self"), attr=m.Name())) else None
        if flag and body is not None and orelse is not None:
            return {True: body, False: orelse}, flag
    return {}, None


def _static(fn: FunctionInfo, flag: str | None) -> str | None:
    """The forward's local set to the switch attribute: ``static_kv: bool = self.encoder_decoder_attention``."""
    if flag is None:
        return None
    value = m.Attribute(value=m.Name("self"), attr=m.Name(flag))
    for node in findall(
        fn.node,
        m.AnnAssign(target=m.Name(), value=value) | m.Assign(targets=[m.AssignTarget(target=m.Name())], value=value),
    ):
        return (node.target if isinstance(node, cst.AnnAssign) else node.targets[0].target).value
    return None


def _saved(fn: FunctionInfo, carrier: str) -> str | None:
    """The local the attention reads its part into: ``saved_state = layer_state.get(self.cache_key, {})``."""
    read = m.Call(func=m.Attribute(value=m.Name(carrier), attr=m.Name("get"))) | m.Subscript(value=m.Name(carrier))
    for node in findall(fn.node, m.Assign(targets=[m.AssignTarget(target=m.Name())], value=read)):
        return node.targets[0].target.value
    return None


def _helpers(info: ModuleInfo, fn: FunctionInfo, name: str) -> list[tuple[FunctionInfo, str]]:
    """Methods of ``fn``'s class that ``fn`` hands ``name`` to (``self._use_saved_state(k, v, saved_state, ...)``),
    each with its parameter that receives it."""
    found = []
    for call in findall(fn.node, m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name()))):
        helper = info.functions.get(f"{fn.cls}.{call.func.attr.value}")
        if helper is None:
            continue
        params = [p for p in helper.params if p != "self"]
        for index, arg in enumerate(call.args):
            if m.matches(arg.value, m.Name(name)):
                param = arg.keyword.value if arg.keyword else (params[index] if index < len(params) else None)
                if param:
                    found.append((helper, param))
    return found


def _reads(scopes: list[tuple[FunctionInfo, str]], field: str) -> list[cst.CSTNode]:
    """``saved["f"]``, ``saved.get("f", ...)`` in each (function, name of the part there)."""
    found = []
    for fn, name in scopes:
        key = m.SimpleString(m.MatchIfTrue(lambda code: code[1:-1] == field))
        found += findall(
            fn.node, m.Subscript(value=m.Name(name), slice=[m.SubscriptElement(slice=m.Index(value=key))])
        )
        found += findall(
            fn.node,
            m.Call(func=m.Attribute(value=m.Name(name), attr=m.Name("get")), args=[m.Arg(value=key), m.ZeroOrMore()]),
        )
    return found


def _shape(call: cst.CSTNode) -> TensorLayout | None:
    """The layout a ``.view(...)``/``.reshape(...)`` gives: its rank, the axis given as ``-1`` (the sequence), and
    the heads factor when its first axis is a product (``bsz * self.num_heads``)."""
    if not m.matches(call, m.Call(func=m.Attribute(attr=m.Name("view") | m.Name("reshape")))):
        return None
    args = [a.value for a in call.args]
    minus_one = [
        i for i, a in enumerate(args) if m.matches(a, m.UnaryOperation(operator=m.Minus(), expression=m.Integer("1")))
    ]
    if len(minus_one) != 1 or len(args) < 2:
        return None
    first = args[0]
    heads = _code(first.right) if m.matches(first, m.BinaryOperation(operator=m.Multiply())) else None
    return TensorLayout(len(args), minus_one[0] - len(args), heads)


def _used(scopes: list[tuple[FunctionInfo, str]], reads: list[cst.CSTNode]) -> TensorLayout | None:
    """The layout a field is read back in: ``saved["f"].view(...)``, or ``x = saved["f"]`` then ``x.view(...)``."""
    for fn, _ in scopes:
        for call in findall(fn.node, m.Call(func=m.Attribute(attr=m.Name("view") | m.Name("reshape")))):
            if any(call.func.value is read for read in reads):
                return _shape(call)
        for assign in findall(fn.node, m.Assign(targets=[m.AssignTarget(target=m.Name())])):
            if any(assign.value is read for read in reads):
                alias = assign.targets[0].target.value
                for call in findall(
                    fn.node, m.Call(func=m.Attribute(value=m.Name(alias), attr=m.Name("view") | m.Name("reshape")))
                ):
                    return _shape(call)
    return None


def _role(name: str) -> str:
    return "key" if name.endswith("key") else "value" if name.endswith("value") else "extra"


def _written_once(scopes: list[tuple[FunctionInfo, str]], key_field: str | None, static: str | None) -> cst.If | None:
    """``if "prev_key" in saved_state and static_kv:``: the test that skips the cross projection once the part
    holds keys."""
    if key_field is None or static is None:
        return None
    fn, name = scopes[0]
    holds = m.Comparison(
        left=m.SimpleString(m.MatchIfTrue(lambda code: code[1:-1] == key_field)),
        comparisons=[m.ComparisonTarget(operator=m.In(), comparator=m.Name(name))],
    )
    for node in findall(fn.node, m.If(test=m.BooleanOperation(operator=m.And()))):
        if m.findall(node.test, holds) and m.findall(node.test, m.Name(static)):
            return node
    return None


def _reorder(info: ModuleInfo, cache: str) -> str | None:
    """The function that reorders the dicts: a loop over its parameter named as the model's cache (or as a cache
    name of the era) whose items' ``.items()`` it walks."""
    names = {cache, *info.era_cache_names}
    for fn in info.functions.values():
        for loop in findall(fn.node, m.For(target=m.Name(), iter=m.Name())):
            if (
                loop.iter.value in fn.params
                and loop.iter.value in names
                and findall(loop.body, m.Call(func=m.Attribute(value=m.Name(loop.target.value), attr=m.Name("items"))))
            ):
                return fn.qualname
    return None


def find(module: cst.Module, info: ModuleInfo, cache: str) -> DictLayout | None:
    """The dict-of-parts layout of ``cache`` (the model's cache variable), or None when the file does not keep its
    past that way."""
    picked = _per_layer(module, cache)
    if picked is None:
        return None
    per_layer, pick = picked
    for fn in info.functions.values():
        if fn.cls is None:
            continue
        written = _part_write(fn)
        if written is None:
            continue
        carrier, write = written
        key = _key_of(write)
        if key is None:
            continue
        parts, flag = _parts(module, info, fn.cls, key)
        if not parts:
            continue
        static = _static(fn, flag)
        saved = _saved(fn, carrier)
        scopes = [(fn, saved)] + _helpers(info, fn, saved) if saved else []
        fields = []
        for element in write.value.elements:
            name = _string(element.key) if isinstance(element, cst.DictElement) else None
            if name is None:
                return None  # a part whose fields are not all named by strings: not this layout
            reads = _reads(scopes, name)
            role = _role(name)
            tensor = role in ("key", "value")
            fields.append(
                Field(
                    name,
                    role,
                    element.value,
                    element,
                    _shape(element.value) if tensor else None,
                    _used(scopes, reads) if tensor else None,
                    tuple(reads),
                )
            )
        if not any(f.role == "key" for f in fields) or not any(f.role == "value" for f in fields):
            continue
        roles = (
            {"cross": parts[True], "self": parts[False]}
            if static and True in parts
            else {"self": parts[None]} if None in parts else {f"`{flag}`": parts[True], f"not `{flag}`": parts[False]}
        )
        key_field = next(f.name for f in fields if f.role == "key")
        return DictLayout(
            cache,
            per_layer,
            pick,
            fn.cls,
            carrier,
            _code(key),
            roles,
            flag,
            static,
            write,
            saved,
            tuple(fields),
            _written_once(scopes, key_field, static) if scopes else None,
            _reorder(info, cache),
            fn.qualname,
        )
    return None
