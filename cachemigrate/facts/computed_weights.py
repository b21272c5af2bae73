"""Modules whose weight only their constructor computes, and that a checkpoint does not hold, for CM460.

Files written before 4.51 (marian, pegasus, roformer, the time-series models) build a sinusoidal position table in
the embedding's constructor, through a method of its own (``self.weight = self._init_weight(self.weight)``: a
static method that fills the parameter it is given and returns it), leave it alone in ``_init_weights``
(``elif isinstance(module, XSinusoidalPositionalEmbedding): pass``) and keep it out of the checkpoint
(``_keys_to_ignore_on_save``) or declare that a checkpoint may lack it (``_keys_to_ignore_on_load_missing``).
Releases that build the model on the meta device in ``from_pretrained`` (4.51.3, 4.57.6, 5.25.0, measured) never run
that constructor on real memory, and fill what the checkpoint lacked only through ``_init_weights``: the table
comes back on the meta device (4.51.3) or uninitialised (4.57.6, 5.25.0).

:func:`computed_weights` answers, per class of the file, whether it is such a module and the method its
constructor computes the weight with. Everything is read off the file's own code; no class name matters."""

from __future__ import annotations

import re

import libcst as cst
import libcst.matchers as m

from ..traverse import findall

# `self.weight = self.<method>(self.weight)`
_FILLED = m.Assign(
    targets=[m.AssignTarget(m.Attribute(m.Name("self"), m.Name("weight")))],
    value=m.Call(
        func=m.Attribute(m.Name("self"), m.Name()),
        args=[m.Arg(m.Attribute(m.Name("self"), m.Name("weight")), keyword=None)],
    ),
)
_SAVE_LISTS = ("_keys_to_ignore_on_save",)  # keys a checkpoint never holds
_LOAD_LISTS = ("_keys_to_ignore_on_load_missing",)  # keys (patterns) a checkpoint may lack


def _methods(cls: cst.ClassDef) -> dict[str, cst.FunctionDef]:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    return {stmt.name.value: stmt for stmt in body if isinstance(stmt, cst.FunctionDef)}


def _is_static_with_one_parameter(function: cst.FunctionDef) -> bool:
    static = any(m.matches(d.decorator, m.Name("staticmethod")) for d in function.decorators)
    params = function.params
    starred = isinstance(params.star_arg, (cst.Param, cst.ParamStar)) or params.star_kwarg is not None
    return (
        static and len(params.params) == 1 and not starred and not params.kwonly_params and not params.posonly_params
    )


def _filling_method(cls: cst.ClassDef) -> str | None:
    """The method ``__init__`` computes ``self.weight`` with (``self.weight = self.<m>(self.weight)``), when ``<m>`` is
    a static method of the class taking the parameter alone and returning it."""
    methods = _methods(cls)
    init = methods.get("__init__")
    if init is None:
        return None
    for assign in findall(init, _FILLED):
        name = assign.value.func.attr.value
        method = methods.get(name)
        if method is not None and _is_static_with_one_parameter(method) and _returns_its_parameter(method):
            return name
    return None


def _returns_its_parameter(function: cst.FunctionDef) -> bool:
    parameter = function.params.params[0].name.value
    returns = findall(function, m.Return())
    return bool(returns) and all(m.matches(r.value, m.Name(parameter)) for r in returns)


def _strings(value: cst.BaseExpression) -> list[str] | None:
    """The strings of a list or tuple literal of plain strings; None for anything else."""
    if not isinstance(value, (cst.List, cst.Tuple)):
        return None
    found = []
    for element in value.elements:
        if not isinstance(element.value, cst.SimpleString):
            return None
        found.append(element.value.evaluated_value)
    return found


def _class_lists(module: cst.Module, names: tuple[str, ...]) -> list[str]:
    """Every string of the class-level lists ``names`` of every class of the file."""
    found: list[str] = []
    for cls in (s for s in module.body if isinstance(s, cst.ClassDef)):
        body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
        for line in body:
            if not isinstance(line, cst.SimpleStatementLine):
                continue
            for stmt in line.body:
                if (
                    isinstance(stmt, cst.Assign)
                    and len(stmt.targets) == 1
                    and m.matches(stmt.targets[0].target, m.Name())
                    and stmt.targets[0].target.value in names
                ):
                    found.extend(_strings(stmt.value) or [])
    return found


def _attributes_built_from(module: cst.Module, name: str) -> set[str]:
    """``<attr>`` of every ``self.<attr> = <name>(...)`` in the file."""
    built = m.Assign(targets=[m.AssignTarget(m.Attribute(m.Name("self"), m.Name()))], value=m.Call(func=m.Name(name)))
    return {a.targets[0].target.attr.value for a in findall(module, built)}


def _not_in_checkpoint(attribute: str, never_saved: list[str], may_lack: list[str]) -> bool:
    key = f"{attribute}.weight"
    if any(entry == key or entry.endswith(f".{key}") for entry in never_saved):
        return True
    for entry in may_lack:
        if entry == key or entry.endswith(f".{key}"):
            return True
        try:
            if re.search(entry, key):
                return True
        except re.error:
            continue
    return False


def computed_weights(module: cst.Module) -> dict[str, str]:
    """{class: the method its constructor computes its weight with} for every class of the file whose constructor
    computes ``self.weight`` through a static method of its own, built as an attribute whose ``.weight`` a
    checkpoint does not hold (``_keys_to_ignore_on_save``) or may lack (``_keys_to_ignore_on_load_missing``)."""
    never_saved, may_lack = _class_lists(module, _SAVE_LISTS), _class_lists(module, _LOAD_LISTS)
    found = {}
    for cls in (s for s in module.body if isinstance(s, cst.ClassDef)):
        method = _filling_method(cls)
        if method is None:
            continue
        attributes = _attributes_built_from(module, cls.name.value)
        if any(_not_in_checkpoint(a, never_saved, may_lack) for a in attributes):
            found[cls.name.value] = method
    return found
