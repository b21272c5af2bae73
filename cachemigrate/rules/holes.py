"""Facts read off a file before the rules run, the functions each rule applies to, and the holes bound per
function (``{cache}``, ``{layers}``, ``{arg0}``...)."""

from __future__ import annotations

from typing import Callable, Mapping

import libcst as cst
import libcst.matchers as m

from ..facts.analysis import ModuleInfo
from ..facts.heads import handed_keyword, head_of
from ..facts.layer_loops import layer_indices
from ..views.patterns import UNBOUND, code_of, compile_statements, match_statements
from .schema import Era
from ..traverse import findall


def functions_in_scope(info: ModuleInfo, role: str, names: tuple[str, ...]) -> tuple[set[str], set[str]]:
    """(qualified names of the functions, names of the classes) a rule of ``role`` applies to."""
    if role == "any":
        classes = set(info.classes)
        functions = {q for q, f in info.functions.items() if f.name in names or "*" in names}
        return functions, classes
    if role == "consumer":  # functions outside a model that edit a past (cachemigrate.facts.consumers)
        return set(info.roles.get("consumer", [])), set()
    if role == "patch":  # module-level functions patched onto a library attention (cachemigrate.facts.patches)
        return set(info.roles.get("patch", [])), set()
    classes = set(info.roles.get(role, []))
    functions = {
        q
        for q, f in info.functions.items()
        if f.cls in classes
        and (_named(info, f, names) or ("*" in names and f.cache_params) or _bound_as(info, f, names))
    }
    return functions, classes


def _named(info: ModuleInfo, fn, names: tuple[str, ...]) -> bool:
    """``fn`` is named one of ``names``, and its class has not handed that name to another method (a ``forward``
    that only returns ``self._helper(...)``: the helper is the forward, :mod:`cachemigrate.facts.analysis`)."""
    methods = info.classes[fn.cls].methods if fn.cls in info.classes else {}
    return fn.name in names and methods.get(fn.name, fn) is fn


def _bound_as(info: ModuleInfo, fn, names: tuple[str, ...]) -> bool:
    """``fn`` is a method its class also binds under one of ``names`` (``forward = decode``)."""
    methods = info.classes[fn.cls].methods if fn.cls in info.classes else {}
    return any(methods.get(name) is fn for name in names)


def find_facts(info: ModuleInfo, era: Era, views=None) -> dict:
    """The value of each fact of the era that the file shows (or its default)."""
    facts: dict[str, str] = {}
    for fact in era.facts:
        functions, _ = functions_in_scope(info, fact.role, fact.functions)
        value = next(
            (
                value
                for case in fact.cases
                for qualname in sorted(functions)
                for value in _fact_values(case, info.functions[qualname].node, views, qualname)
            ),
            fact.default,
        )
        if value is not None:
            facts[fact.name] = value
    return facts


def _fact_values(case: Mapping, node: cst.FunctionDef, file_views, qualname: str):
    """Values the fact case gives in one function, for every place its pattern matches (in its view)."""
    pattern = compile_statements(case["pattern"])
    function_views = file_views.of(qualname) if file_views is not None else None
    blocks = list(function_views.blocks.values()) if function_views is not None else None
    if blocks is None:
        blocks = [list(block.body) for block in findall(node, m.IndentedBlock())]
    for block in blocks:
        views = [v.node if hasattr(v, "start") else v for v in block]
        for index in range(len(views)):
            captures = match_statements(pattern, views, index, {})
            if captures is not None and all(
                _mentions(captures[hole], name) for hole, name in case.get("mentions", {}).items()
            ):
                yield case.get("value") or cst.Module(body=[]).code_for_node(captures[case["capture"]])


def _mentions(node: cst.CSTNode, name: str) -> bool:
    """The captured code reads ``name``, as a variable or as an attribute (``self.config.name``)."""
    return bool(findall(node, m.Name(name) | m.Attribute(attr=m.Name(name))))


# Holes bound from the function's own signature and head: its cache parameter, its `**kwargs`, the library model a
# head hands the past. In a function that has no such thing (a `prepare_inputs_for_generation` that takes no cache),
# the hole matches nothing: left free, `{cache} is None` would match any `x is None` there (4.30.2's
# BertForMaskedLM: `self.config.pad_token_id is None`). (`{outputs}` and `{layers}` are free holes in some rules.)
FUNCTION_HOLES = frozenset({"cache", "library_model", "var_kwargs"})


def bound_holes(
    info: ModuleInfo, facts: Mapping[str, str], filters: Mapping[str, Callable] | None = None
) -> Callable[[str | None], dict[str, str]]:
    """A function from a qualified function name to the holes bound in it (and the templates' filters, keyed
    ``"|name"``)."""
    layers = {}
    for name in info.roles["base_model"]:
        cls = info.classes[name]
        for attr, block in cls.module_lists.items():
            if block in info.roles["block"]:
                layers[name] = f"self.{attr}"
    # `{i|layer_index}`: a name that is the position of the layer its loop runs (facts/layer_loops.py)
    indices = {
        fn.qualname: frozenset(layer_indices(fn, info.classes[name], attr))
        for name, attr in layers.items()
        for fn in info.classes[name].methods.values()
    }

    def values_in(qualname: str | None) -> dict[str, str]:
        values = dict(facts)
        values.update(filters or {})
        fn = info.functions.get(qualname) if qualname else None
        if fn is not None and fn.cache_params:
            values["cache"] = fn.cache_params[0]
        if fn is not None:
            arguments = [p for p in fn.params if p not in ("self", "cls")]
            values.update({f"arg{i}": name for i, name in enumerate(arguments)})
        if fn is not None and isinstance(fn.node.params.star_kwarg, cst.Param):  # `**kwargs`, by its own name
            values["var_kwargs"] = fn.node.params.star_kwarg.name.value
        if fn is not None and fn.cls in layers:
            values["layers"] = layers[fn.cls]
        head = head_of(info, fn.cls) if fn is not None and fn.name == "forward" else None
        if head is not None:  # `{library_model}`: what a head hands the past; `{outputs}`: what it binds it returns to
            values["library_model"] = f"self.{head.attribute}"
            if head.outputs:
                values["outputs"] = head.outputs
            # `{handed_use_cache}`: what the head hands it as `use_cache` (a library module's default: None)
            handed = handed_keyword(fn.node, head.attribute, "use_cache")
            values["handed_use_cache"] = code_of(handed) if handed is not None else "None"
        values[UNBOUND] = FUNCTION_HOLES - values.keys()
        names = indices.get(qualname, frozenset())
        values["?layer_index"] = lambda node: isinstance(node, cst.Name) and node.value in names
        return values

    known: dict[str | None, dict[str, str]] = {}  # the facts and the analysis do not change while rules plan

    def bound(qualname: str | None) -> dict[str, str]:
        values = known.get(qualname)
        if values is None:
            values = known[qualname] = values_in(qualname)
        return dict(values)  # the caller's own: a planner may add to it

    return bound
