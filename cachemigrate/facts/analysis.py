"""Parsing and roles: find where a modeling file keeps its KV cache and what each class does with it.

Everything here is structural; class names never matter.

* A *cache variable* is a function parameter whose name is one of the era's cache names (``layer_past``,
  ``past_key_values``...), or a local that is assigned straight from one (``layer_past = past_key_values``).
* Each use of a cache variable is classified:

  ``check``   ``x is None``, ``x is not None`` (and ``== None``), ``isinstance(x, ...)``, a truth test
              (``if x:``, ``x and ...``, ``not x``: a Cache has a length, so it tests like a tuple)
  ``api``     an attribute of it (``x.update(...)``, ``x.get_seq_length()``): the Cache API
  ``pass``    handed on unchanged: a call argument, a return value, an element of a literal
  ``alias``   bound to another name (``y = x``, ``a, y = b, x``, ``y = x if c else None``)
  ``legacy``  anything that relies on the tuple layout: indexing, unpacking, iterating, ``zip``/``len``,
              arithmetic

* Roles follow from the uses:

  attention   a class whose ``forward`` uses its cache parameter in a legacy way
  block       a class whose ``forward`` passes its cache parameter to ``self.<attr>(...)``, where ``<attr>`` is
              built from an attention class in ``__init__``
  base_model  a class whose ``__init__`` builds an ``nn.ModuleList`` of blocks and whose ``forward`` has a cache
              parameter
  pretrained  the class the base model inherits from that derives from ``PreTrainedModel``
  head        other subclasses of ``pretrained`` whose ``forward`` has a cache parameter

A file is migrated when, after the rules ran, no legacy use is left outside code that is guarded by an
``isinstance(x, Cache)`` test; see :func:`legacy_uses`.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import libcst as cst
import libcst.matchers as m

from ..views.patterns import code_of
from .model import ClassInfo, FunctionInfo, ModuleInfo  # noqa: F401 (re-exported)
from .consumers import consumers
from .patches import library_subclasses, patch_functions
from .roles import assign_roles
from .heads import generating_heads, library_heads, pretrained_bases
from .custom_reorder import stacked_reorders
from .one_layer import single_layers
from ..traverse import findall, positions, walk
from .uses import (  # noqa: F401 (re-exported: the use kinds and their vocabulary)
    CACHE_ONLY_ATTRIBUTES,
    CHECKING_BUILTINS,
    CONSUMING_BUILTINS,
    GUARD_TYPES,
    CacheUse,
    _UseCollector,
    tuple_aliases,
)

# --------------------------------------------------------------------------------------------------------------
# Module analysis
# --------------------------------------------------------------------------------------------------------------


def _dotted(node: cst.CSTNode) -> str:
    return code_of(node)


def _unparenthesised(node: cst.BaseExpression) -> cst.BaseExpression:
    """The expression without its own parentheses (a tuple keeps them: ``()`` cannot lose them)."""
    if isinstance(node, cst.Tuple) or not getattr(node, "lpar", None):
        return node
    return node.with_changes(lpar=(), rpar=())


def _statements(body: Sequence[cst.BaseStatement]) -> Iterable[cst.BaseStatement]:
    """The statements of a class or module body, looking into ``if``/``else``/``try`` blocks (conditional
    definitions) but not into classes, functions or loops."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (cst.If, cst.Try)):
            yield from _statements(stmt.body.body)
            orelse = getattr(stmt, "orelse", None)
            while orelse is not None:
                yield from _statements(orelse.body.body)
                orelse = getattr(orelse, "orelse", None) if isinstance(orelse, cst.If) else None
            for handler in getattr(stmt, "handlers", ()):
                yield from _statements(handler.body.body)


class _Structure:
    """Classes, their bases, methods and the submodules their ``__init__`` builds.

    Only the statement structure is walked (classes, functions, and the blocks of ``if``/``try`` around them);
    function bodies are not visited here."""

    def __init__(self, cache_names: Sequence[str], uses_only: bool = False) -> None:
        self.cache_names = list(cache_names)
        self.uses_only = uses_only  # the functions and methods only: no submodules read off the ``__init__``s
        self.tables: dict[str, list[str]] = {}  # NAME = {"eager": A, "sdpa": B}: class choice tables
        self.classes: dict[str, ClassInfo] = {}
        self.functions: dict[str, FunctionInfo] = {}
        self.function_nodes: list[tuple[FunctionInfo, cst.FunctionDef]] = []

    def run(self, module: cst.Module) -> None:
        for stmt in module.body:
            table = m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name())], value=m.Dict())])
            if m.matches(stmt, table):
                values = [e.value for e in stmt.body[0].value.elements if isinstance(e, cst.DictElement)]
                if values and all(isinstance(v, (cst.Name, cst.Attribute)) for v in values):
                    self.tables[stmt.body[0].targets[0].target.value] = [_dotted(v) for v in values]
        for stmt in _statements(module.body):
            if isinstance(stmt, cst.ClassDef):
                info = ClassInfo(stmt.name.value, [_dotted(b.value) for b in stmt.bases if b.keyword is None])
                self.classes[info.name] = info
                for member in _statements(stmt.body.body):
                    if isinstance(member, cst.FunctionDef):
                        self._function(member, info)
                    elif m.matches(member, _BOUND_AS_METHOD) and member.body[0].value.value in info.methods:
                        # `forward = decode`: the method bound under another name is that method too
                        bound = member.body[0]
                        info.methods.setdefault(bound.targets[0].target.value, info.methods[bound.value.value])
                helper = _delegate(info)
                if helper is not None:  # a forward that only returns `self.<helper>(...)`: the helper is the forward
                    info.methods["forward"] = info.methods[helper]
            elif isinstance(stmt, cst.FunctionDef):
                self._function(stmt, None)

    def _function(self, node: cst.FunctionDef, cls: ClassInfo | None) -> None:
        params = [p.name.value for p in (*node.params.posonly_params, *node.params.params, *node.params.kwonly_params)]
        qualname = f"{cls.name}.{node.name.value}" if cls else node.name.value
        info = FunctionInfo(
            qualname=qualname,
            name=node.name.value,
            cls=cls.name if cls else None,
            params=params,
            cache_params=[p for p in params if p in self.cache_names],
            has_var_kwargs=isinstance(node.params.star_kwarg, cst.Param),
            node=node,
        )
        self.functions[qualname] = info
        self.function_nodes.append((info, node))
        if cls is not None:
            cls.methods[info.name] = info
            if info.name == "__init__" and not self.uses_only:
                self._collect_submodules(cls, node)

    def _collect_submodules(self, cls: ClassInfo, init: cst.FunctionDef) -> None:
        self_attr = m.AssignTarget(m.Attribute(value=m.Name("self"), attr=m.SaveMatchedNode(m.Name(), "attr")))
        built = m.Call(func=m.SaveMatchedNode(m.Name() | m.Attribute(), "cls"))
        module_list = m.Call(
            func=m.Attribute(attr=m.Name("ModuleList")) | m.Name("ModuleList"),
            args=[m.Arg(m.ListComp(elt=built) | m.GeneratorExp(elt=built) | m.List([m.Element(built)]))],
        )
        cls.class_aliases = _class_aliases(init)
        appended, parts = self._appended(init, cls.class_aliases)
        module_list_of = m.Attribute(attr=m.Name("ModuleList")) | m.Name("ModuleList")
        filled = (
            m.Call(func=module_list_of, args=[])
            | m.Call(func=module_list_of, args=[m.Arg(m.List([]))])  # `nn.ModuleList([])`: empty too
            | m.Call(func=module_list_of, args=[m.Arg(m.SaveMatchedNode(m.Name(), "list"))])
        )
        for assign in findall(init, m.Assign(targets=[self_attr])):
            target = m.extract(assign.targets[0], self_attr)
            attr = target["attr"].value
            found = m.extract(assign.value, module_list)
            if found:
                cls.module_lists[attr] = _dotted(found["cls"])
                continue
            # `self.layers = nn.ModuleList()` then `self.layers.append(Layer(...))` in a loop (NLLB-MoE), or a local
            # list filled by `layers.append(Layer(...))` and wrapped: `self.layers = nn.ModuleList(layers)`
            found = m.extract(assign.value, filled)
            if found is not None:
                holder = f"self.{attr}" if "list" not in found else found["list"].value
                if holder in appended:
                    cls.module_lists[attr] = appended[holder]
                elif holder in parts:  # a block's parts, each appended once: `self.layer[0](...)` calls one
                    cls.choices[attr] = parts[holder]
                continue
            listed = self._listed_parts(assign.value)
            if listed:  # `nn.ModuleList([SelfPart(...), CrossPart(...)])`: a block's parts, not a stack of layers
                cls.choices[attr] = listed
                continue
            classes = self._built_classes(assign.value)
            if classes:  # an attribute built in several branches (BigBird's `self.self`) may hold any of them
                cls.submodules.setdefault(attr, classes[0])
                cls.choices[attr] = cls.choices.get(attr, []) + [
                    c for c in classes if c not in cls.choices.get(attr, [])
                ]

    def _appended(self, init: cst.FunctionDef, aliases: dict) -> tuple[dict[str, str], dict[str, list[str]]]:
        """``holder.append(Cls(...))`` calls of ``init``. In a loop they stack layers: holder code (``self.layers``,
        ``layers``) -> the class of the modules appended. Outside any loop they build a block's parts, one module
        each (a self-attention part, a cross-attention part under ``if self.is_decoder:``, a feed-forward part):
        holder code -> the classes appended, in order."""
        call = m.Call(
            func=m.Attribute(value=m.SaveMatchedNode(m.Name() | m.Attribute(), "holder"), attr=m.Name("append")),
            args=[m.Arg(m.Call(func=m.SaveMatchedNode(m.Name() | m.Attribute(), "cls")))],
        )
        found: dict[str, str] = {}
        in_loops = set()
        for loop in findall(init, m.For() | m.While()):
            for node in findall(loop.body, call):
                in_loops.add(node)
                captured = m.extract(node, call)
                found.setdefault(_dotted(captured["holder"]), _dotted(captured["cls"]))
        parts: dict[str, list[str]] = {}
        for node in findall(init.body, call):
            captured = m.extract(node, call)
            holder = _dotted(captured["holder"])
            if node in in_loops or holder in found:
                continue
            classes = parts.setdefault(holder, [])
            built = _dotted(captured["cls"])
            for name in aliases.get(built, [built]):  # `attention_layer(...)`, a local set to one class or another
                if name not in classes:
                    classes.append(name)
        return found, parts

    def _listed_parts(self, value: cst.BaseExpression) -> list[str]:
        """``nn.ModuleList([A(...), B(...), ...])`` with two modules or more listed one by one: the classes."""
        module_list_of = m.Attribute(attr=m.Name("ModuleList")) | m.Name("ModuleList")
        if not m.matches(value, m.Call(func=module_list_of, args=[m.Arg(m.List())])):
            return []
        elements = value.args[0].value.elements
        if len(elements) < 2 or not all(
            isinstance(e, cst.Element) and isinstance(e.value, cst.Call) for e in elements
        ):
            return []
        classes: list[str] = []
        for element in elements:
            for name in self._built_classes(element.value):
                if name not in classes:
                    classes.append(name)
        return classes

    def _built_classes(self, value: cst.BaseExpression) -> list[str]:
        """The classes an expression builds a module from: ``A(...)``, ``A(...) if c else B(...)``,
        ``(A if c else B)(...)``, ``TABLE[key](...)`` with ``TABLE`` a module-level dict of classes."""
        value = _unparenthesised(value)
        if isinstance(value, cst.IfExp):
            return self._built_classes(value.body) + self._built_classes(value.orelse)
        if not isinstance(value, cst.Call):
            return []
        func = _unparenthesised(value.func)
        if isinstance(func, cst.IfExp):
            return [_dotted(b) for b in (func.body, func.orelse) if isinstance(b, (cst.Name, cst.Attribute))]
        if isinstance(func, cst.Subscript) and isinstance(func.value, cst.Name):
            return list(self.tables.get(func.value.value, []))
        if isinstance(func, (cst.Name, cst.Attribute)):
            return [_dotted(func)]
        return []


def _delegate(cls: ClassInfo) -> str | None:
    """The method a class's ``forward`` hands its whole work to: a body of one ``return self.<method>(...)`` (after
    a docstring) that hands on every parameter of the forward, its cache among them; the method takes the cache."""
    forward = cls.methods.get("forward")
    if forward is None or not forward.cache_params:
        return None
    body = [s for s in forward.node.body.body if not m.matches(s, m.SimpleStatementLine([m.Expr(m.SimpleString())]))]
    call = m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name()))
    if len(body) != 1 or not m.matches(body[0], m.SimpleStatementLine([m.Return(value=call)])):
        return None
    invoked = body[0].body[0].value
    helper = cls.methods.get(invoked.func.attr.value)
    handed = {a.value.value for a in invoked.args if isinstance(a.value, cst.Name)}
    if helper is None or helper is forward or not helper.cache_params:
        return None
    return helper.name if set(forward.params[1:]) <= handed else None


# `name = other` in a class body: a method bound under another name
_BOUND_AS_METHOD = m.SimpleStatementLine([m.Assign(targets=[m.AssignTarget(m.Name())], value=m.Name())])


def _class_aliases(init: cst.FunctionDef) -> dict[str, list[str]]:
    """Local names of ``init`` set to a class in its branches (``attention_layer = LocalPart`` under ``if``, another
    class under ``elif``) and only ever to a name or dotted name: name -> the classes, in code order."""
    found: dict[str, list[str]] = {}
    other: set[str] = set()
    for assign in findall(init.body, m.Assign(targets=[m.AssignTarget(m.Name())])):
        name = assign.targets[0].target.value
        if isinstance(assign.value, (cst.Name, cst.Attribute)) and not m.matches(assign.value, m.Name("None")):
            found.setdefault(name, []).append(_dotted(assign.value))
        else:
            other.add(name)
    return {name: classes for name, classes in found.items() if name not in other}


def analyze(module: cst.Module, cache_names: Sequence[str], only: set[str] | None = None) -> ModuleInfo:
    """Classes, functions, cache uses and roles of a parsed module.

    Each function that has a cache parameter is walked once, for its uses (the parents they read are recorded on
    the way), after its tuple aliases were read off its assignments; no metadata is computed: positions are
    resolved later, and only for what is reported (:class:`Locator`). With ``only`` (qualified names), the uses of
    just those functions are collected, and nothing else: no roles, no module globals, no submodules (the
    re-check of the edited functions, :func:`cachemigrate.proof.leftovers.leftover_diagnostics`, reads their
    uses only; the library facts behind the roles each cost a walk of the module)."""
    structure = _Structure(cache_names, uses_only=only is not None)
    structure.run(module)
    for info, node in structure.function_nodes:
        if not info.cache_params or (only is not None and info.qualname not in only):
            continue
        names = set(info.cache_params)
        tuple_aliases(node, names)
        collector = _UseCollector(node, info, names)
        walk(node.body, collector)
        info.cache_names = set(collector.names)
    if only is not None:
        return ModuleInfo(structure.classes, structure.functions, {})
    for model, (attribute, layer) in single_layers(structure.classes).items():
        structure.classes[model].single_layers = {attribute: layer}
    roles = assign_roles(structure.classes)
    unproven: list = []
    roles["consumer"] = []
    # module-level functions patched onto a library attention: the library's contract, not the file's (facts/patches)
    roles["patch"] = patch_functions(module, structure.functions)
    if not roles["base_model"]:  # subclasses of a library attention that a library model calls, not the file's
        swapped = library_subclasses(module, structure.classes)
        roles["attention"] = [name for name in roles["attention"] if name not in swapped]
        roles["patch"] += [f"{name}.forward" for name in swapped]
    if not roles["attention"] and not roles["base_model"]:  # no model: functions that edit a past handed to them
        others = {q: fn for q, fn in structure.functions.items() if q not in roles["patch"]}
        roles["consumer"], unproven = consumers(others)
    over = library_heads(module, structure.classes) if not roles["attention"] and not roles["base_model"] else []
    if over:  # a head over a library model is a head, and a `library_head` (rules of its own)
        roles["head"] += [head.name for head in over if head.name not in roles["head"]]
        roles["library_head"] = [head.name for head in over]
        # a head over a model hands it the Cache that model takes; a head over a model's stack of layers hands it
        # what that stack's own model would (the rules of each era say which)
        roles["library_model"] = [head.name for head in over if not head.stack and not head.encoder_decoder]
        roles["library_stack"] = [head.name for head in over if head.stack]
        roles["library_seq2seq"] = [head.name for head in over if head.encoder_decoder]  # four tensors per layer
        # the file's own PreTrainedModel classes the heads derive from, and the classes built on those that
        # generate (a causal head over the file's own model, itself over the library's layers): heads too
        roles["library_pretrained"] = pretrained_bases(structure.classes, roles["library_head"])
        roles["head"] += generating_heads(structure.classes, roles["library_pretrained"], roles["head"])
        roles["stacked_reorder"] = stacked_reorders(structure.classes, roles["head"], structure.functions)
    return ModuleInfo(
        structure.classes, structure.functions, roles, module_globals(module), unproven, over, tuple(cache_names)
    )


def module_globals(module: cst.Module) -> set[str]:
    """Names bound by the module's top-level statements: imports, classes, functions, assignments."""
    names: set[str] = set()
    for stmt in module.body:
        if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)):
            names.add(stmt.name.value)
            continue
        for alias in findall(stmt, m.ImportAlias()):
            bound = alias.asname.name if alias.asname else alias.name
            names.add(code_of(bound).split(".")[0])
        for target in findall(stmt, m.AssignTarget(m.Name())):
            names.add(target.target.value)
    return names


class Locator:
    """Line and column of nodes of one parsed module, computed on first use (positions cost a full pass)."""

    def __init__(self, module: cst.Module, code: str | None = None) -> None:
        self.module = module
        self._positions = None
        self._code = code  # the text the module was parsed from, if known

    @property
    def code(self) -> str:
        """The module's text (its code, computed once)."""
        if self._code is None:
            self._code = self.module.code
        return self._code

    def __call__(self, node: cst.CSTNode | None) -> tuple[int, int]:
        if node is None:
            return 1, 1
        if self._positions is None:
            self._positions = positions(self.module)
        start = self._positions[node].start
        return start.line, start.column + 1

    def holds(self, node: cst.CSTNode) -> bool:
        """The node is one of this module's (a package's facts hold the nodes of its other modules too)."""
        self(None if node is None else self.module)
        return node in self._positions

    def last_line(self, node: cst.CSTNode) -> int:
        """The line a node ends on."""
        self(node)
        return self._positions[node].end.line
