"""Whether a field of a dict-of-parts past other than its keys and values is dead (:mod:`.dict_layout`).

An ``EncoderDecoderCache`` keeps keys and values only. fairseq's parts also carry ``prev_key_padding_mask``, which
the attention writes on each step and concatenates with the new step's mask on the next. Dropping it is right only
where every past the model hands out holds None there, and that is proven per part, from the code:

- the value the attention writes, with its written-once switch settled for the part (``key_padding_mask if not
  static_kv else None`` is None in the cross part);
- else, where the value is a parameter of the attention's forward, the argument each caller of the file hands the
  attention of that part (``self.self_attn(..., key_padding_mask=decoder_padding_mask)``), followed up through the
  callers' own parameters (the block's, the decoder's) to a caller that sets it to None in the ``else`` of an
  ``if not use_cache ...``, the branch that runs whenever the model keeps a cache, and passes that ``use_cache`` on.

A field not proven dead is a blocker, named at the line that writes it (:func:`prove`).
"""

from __future__ import annotations

import dataclasses

import libcst as cst
import libcst.matchers as m

from ..traverse import findall, nodes
from .dict_layout import DictLayout, Field
from .model import FunctionInfo, ModuleInfo

_NONE = m.Name("None")


@dataclasses.dataclass
class Proof:
    """``dead``: every past the model hands out holds None in the field. ``steps``: how (for the diagnostic).
    ``node``/``why``: where and why the proof stops, when it is not dead."""

    dead: bool
    steps: list = dataclasses.field(default_factory=list)
    node: cst.CSTNode | None = None
    why: str = ""


def _settle(expr: cst.BaseExpression, static: str | None, truth: bool) -> cst.BaseExpression:
    """``a if not static else b`` (or ``a if static else b``) with ``static`` known to be ``truth``."""
    while isinstance(expr, cst.IfExp) and static:
        test, flip = expr.test, False
        if m.matches(test, m.UnaryOperation(operator=m.Not(), expression=m.Name(static))):
            flip = True
        elif not m.matches(test, m.Name(static)):
            return expr
        expr = expr.body if truth != flip else expr.orelse
    return expr


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _switch_param(info: ModuleInfo, cls: str, switch: str | None) -> tuple[str, int, cst.BaseExpression | None] | None:
    """The parameter of ``cls.__init__`` that sets ``self.<switch>`` (``self.cross = cross``): its name, its index
    among the positional parameters, and its default."""
    init = info.functions.get(f"{cls}.__init__")
    if init is None or switch is None:
        return None
    target = m.AssignTarget(target=m.Attribute(value=m.Name("self"), attr=m.Name(switch)))
    for node in findall(init.node, m.Assign(targets=[target], value=m.Name())):
        name = node.value.value
        params = [p for p in init.node.params.params if p.name.value != "self"]
        for index, param in enumerate(params):
            if param.name.value == name:
                return name, index, param.default
    return None


def _part_of_build(built: FunctionInfo | None, attr: str, switch: tuple | None) -> str | None:
    """The part an attention built as ``self.<attr> = Attention(...)`` in ``built`` (an ``__init__``) writes:
    "cross" where its switch is handed True, "self" where False (or left to a False default); None where the code
    does not show it (the switch handed something else, or no such build found)."""
    if built is None or switch is None:
        return None
    name, index, default = switch
    target = m.AssignTarget(target=m.Attribute(value=m.Name("self"), attr=m.Name(attr)))
    for node in findall(built.node, m.Assign(targets=[target], value=m.Call())):
        value = default
        positional = [arg for arg in node.value.args if arg.keyword is None and not arg.star]
        if any(arg.star for arg in node.value.args):
            return None
        if index < len(positional):
            value = positional[index].value
        for arg in node.value.args:
            if arg.keyword is not None and arg.keyword.value == name:
                value = arg.value
        if m.matches(value, m.Name("True")):
            return "cross"
        if m.matches(value, m.Name("False")):
            return "self"
        return None
    return None


def _callers(info: ModuleInfo, cls: str, part: str | None, switch: str | None):
    """(caller, call) for each call of ``cls`` in a method of another class of the file: ``self.attr(...)`` for an
    attribute built from ``cls`` (of the part ``part`` where given, or of a part the code does not show), or
    ``x(...)`` for ``x`` looped over a ``ModuleList`` of ``cls``."""
    switch = _switch_param(info, cls, switch)
    for other in info.classes.values():
        init = other.methods.get("__init__")
        attrs = {a for a, c in other.submodules.items() if c == cls}
        attrs |= {a for a, cs in other.choices.items() if cls in cs}
        lists = {a for a, c in other.module_lists.items() if c == cls}
        for fn in other.methods.values():
            for call in findall(fn.node, m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name()))):
                attr = call.func.attr.value
                if attr in attrs and (part is None or _part_of_build(init, attr, switch) in (part, None)):
                    yield fn, call
            for loop in findall(fn.node, m.For()):
                if not any(m.findall(loop.iter, m.Attribute(value=m.Name("self"), attr=m.Name(a))) for a in lists):
                    continue
                target = loop.target
                names = (
                    [target] if isinstance(target, cst.Name) else [e.value for e in getattr(target, "elements", [])]
                )
                for name in (n.value for n in names if isinstance(n, cst.Name)):
                    for call in findall(loop.body, m.Call(func=m.Name(name))):
                        yield fn, call


def _argument(call: cst.Call, callee: FunctionInfo, param: str) -> cst.BaseExpression | None:
    """What ``call`` hands ``callee``'s parameter ``param``: its argument, else the parameter's default (None when
    neither: a ``**kwargs`` call, or a parameter without a default)."""
    params = [p for p in callee.params if p != "self"]
    for index, arg in enumerate(call.args):
        if arg.star:
            return None
        if (arg.keyword is not None and arg.keyword.value == param) or (
            arg.keyword is None and index < len(params) and params[index] == param
        ):
            return arg.value
    for p in callee.node.params.params + callee.node.params.kwonly_params:
        if p.name.value == param:
            return p.default
    return None


def _assigned(fn: FunctionInfo, name: str) -> list[cst.CSTNode]:
    """The statements of ``fn`` that bind ``name``."""
    return _assigned_in(fn.node, name)


def _none_in_else(fn: FunctionInfo, name: str, flag: str) -> cst.If | None:
    """``if not <flag> ...: <name> = ...  else: <name> = None`` (also unpacked: ``x, y = None, None``), with every
    binding of ``name`` in ``fn`` inside it: the ``if``."""
    not_flag = m.UnaryOperation(operator=m.Not(), expression=m.Name(flag))
    test = not_flag | m.BooleanOperation(operator=m.And(), left=not_flag)
    every = set(_assigned(fn, name))
    for node in findall(fn.node, m.If(test=test, orelse=m.Else())):
        inside = set(_assigned_in(node.body, name))
        otherwise = _assigned_in(node.orelse.body, name)
        if not otherwise or (inside | set(otherwise)) != every:
            continue
        if all(_binds_none(statement, name) for statement in otherwise) and not _rebound_after(fn, flag, node):
            return node
    return None


def _rebound_after(fn: FunctionInfo, flag: str, branch: cst.If) -> bool:
    """``flag`` is bound again after ``branch`` (so what the call hands on may not be what the branch tested)."""
    order = {id(node): index for index, node in enumerate(nodes(fn.node))}
    return any(order[id(node)] > order[id(branch)] for node in _assigned(fn, flag))


def _assigned_in(body: cst.CSTNode, name: str) -> list[cst.CSTNode]:
    """The statements under ``body`` that bind ``name`` (``x = ...``, ``x, y = ...``, ``x: T = ...``, ``x += ...``)."""
    target = m.Name(name) | m.Tuple(elements=[m.ZeroOrMore(), m.Element(value=m.Name(name)), m.ZeroOrMore()])
    return findall(
        body,
        m.Assign(targets=[m.ZeroOrMore(), m.AssignTarget(target=target), m.ZeroOrMore()])
        | m.AnnAssign(target=m.Name(name))
        | m.AugAssign(target=m.Name(name)),
    )


def _binds_none(statement: cst.CSTNode, name: str) -> bool:
    if not isinstance(statement, cst.Assign) or len(statement.targets) != 1:
        return False
    target, value = statement.targets[0].target, statement.value
    if isinstance(target, cst.Name):
        return m.matches(value, _NONE)
    if isinstance(target, cst.Tuple) and isinstance(value, cst.Tuple) and len(value.elements) == len(target.elements):
        for element, item in zip(target.elements, value.elements):
            if m.matches(element.value, m.Name(name)):
                return m.matches(item.value, _NONE)
    return False


def _cache_flag(fn: FunctionInfo, call: cst.Call) -> tuple[str, str] | None:
    """The switch that decides whether a past is kept where ``fn`` makes ``call``: the name the call hands on as
    ``use_cache=``, else ``fn``'s own ``use_cache`` where ``fn`` keeps the past under it itself (``if use_cache:``
    or ``... if use_cache else None``)."""
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "use_cache" and isinstance(arg.value, cst.Name):
            return arg.value.value, f"hands that `{arg.value.value}` on"
    flag = "use_cache"
    if flag in fn.params and findall(fn.node, m.If(test=m.Name(flag)) | m.IfExp(test=m.Name(flag), orelse=_NONE)):
        return flag, f"keeps the past only when `{flag}` is true"
    return None


def _trace(
    info: ModuleInfo,
    cls: str,
    param: str,
    part: str | None,
    switch: str | None,
    proof: Proof,
    seen: dict,
    carrier: str | None = None,
) -> bool:
    """Every caller of ``cls`` (of part ``part``) hands its forward's ``param`` None whenever a cache is kept. With
    ``carrier`` (the attention's parameter that holds the layer's dict), a caller that hands it none (an encoder's
    self-attention: the part goes to a dict of its own, thrown away) keeps nothing and is left out."""
    callee = info.functions.get(f"{cls}.forward")
    if (cls, param) in seen:  # proven already (True), or being proven: a cycle of calls proves nothing (False)
        if not seen[(cls, param)]:
            proof.why = f"`{param}` of {cls}.forward is handed on in a cycle of calls"
        return seen[(cls, param)]
    seen[(cls, param)] = False
    if callee is None:
        proof.why = f"`{param}` of {cls}.forward is not followed to its callers"
        return False
    callers = list(_callers(info, cls, part, switch))
    if not callers:
        proof.why = f"{cls} is called by no class of the file, so what its forward's `{param}` holds is not shown"
        return False
    for fn, call in callers:
        if carrier is not None and m.matches(_argument(call, callee, carrier) or _NONE, _NONE):
            proof.steps.append(f"{fn.qualname} hands it no `{carrier}` (nothing of it is kept)")
            continue
        value = _argument(call, callee, param)
        if value is None:
            proof.why = f"{fn.qualname} hands {cls} `{param}` in a way the proof does not follow"
            proof.node = call
            return False
        if m.matches(value, _NONE):
            proof.steps.append(f"{fn.qualname} hands it None")
            continue
        if not isinstance(value, cst.Name):
            proof.why = f"{fn.qualname} hands {cls} `{param}` as `{_code(value)}`, not shown None when a cache is kept"
            proof.node = call
            return False
        name = value.value
        if not _assigned(fn, name) and name in fn.params and fn.name == "forward" and fn.cls:
            proof.steps.append(f"{fn.qualname} hands it its own `{name}`")
            if not _trace(info, fn.cls, name, None, None, proof, seen):
                return False
            continue
        flag, kept = _cache_flag(fn, call) or (None, "")
        branch = _none_in_else(fn, name, flag) if flag else None
        if branch is None:
            proof.why = (
                f"{fn.qualname} hands {cls} `{param}` as `{name}`, which is not shown to be None whenever "
                "`use_cache` is true"
            )
            proof.node = call
            return False
        proof.steps.append(
            f"{fn.qualname} sets `{name}` to None whenever `{flag}` is true (the `else` of `if {_code(branch.test)}:`) "
            f"and {kept}"
        )
        proof.node = branch
    seen[(cls, param)] = True
    return True


def prove(info: ModuleInfo, layout: DictLayout, field: Field) -> Proof:
    """Whether ``field`` holds None in every part of every past the model hands out."""
    proof = Proof(False)
    for part in layout.parts:
        truth = part == "cross"
        value = _settle(field.written, layout.static, truth)
        if m.matches(value, _NONE):
            proof.steps.append(f"the {part} part stores None (`{_code(field.written)}`)")
            continue
        attention = info.functions.get(layout.forward)
        if not isinstance(value, cst.Name) or attention is None or value.value not in attention.params:
            proof.why = f"the {part} part stores `{_code(value)}`, which is not a parameter of {layout.forward}"
            proof.node = field.element
            return proof
        proof.steps.append(f"the {part} part stores {layout.forward}'s `{value.value}`")
        if not _trace(
            info,
            layout.attention,
            value.value,
            part if len(layout.parts) > 1 else None,
            layout.switch,
            proof,
            {},
            layout.carrier,
        ):
            proof.node = proof.node or field.element
            return proof
    proof.dead, proof.node = True, None
    return proof
