"""``thread_layer_idx``: make every attention know its layer index, as ``cache.update(..., self.layer_idx)`` needs.

* attention ``__init__``: gains ``layer_idx=None`` (at the end) and stores ``self.layer_idx = layer_idx``;
* block ``__init__``: gains ``layer_idx=None`` and passes ``layer_idx=layer_idx`` to the attention it builds
  (also through a local set to one class or another, ``attention_layer(config)``: a class of the file that local
  may hold instead gains ``layer_idx=None`` too, and ignores it);
* base model ``__init__``: the ``nn.ModuleList([Block(...) for i in range(n)])`` passes ``layer_idx=i``
  (a ``_`` loop variable is renamed to ``layer_idx``); a one-layer model's ``self.layer = Block(...)`` passes
  ``layer_idx=0`` (:mod:`cachemigrate.facts.one_layer`);
* an attention or block rebuilt in another method of an attention or block (BigBird's ``set_attention_type``
  swaps ``self.self`` for a new ``BigBirdSelfAttention(self.config)``) gets ``layer_idx=self.layer_idx``, and the
  class stores ``self.layer_idx`` in its ``__init__``; a rebuild anywhere else (a model's method, a function) cannot
  be given the index and is reported: the rebuilt attention would update the cache at layer ``None``.

Parts that already carry the index are left alone."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..edit.edits import Replace
from ..views.patterns import code_of
from .add_parameter import add_parameter, has_parameter
from .base import Action, Planner
from .helpers import append_item
from ..traverse import findall


class ThreadLayerIdx(Action):
    name = "thread_layer_idx"
    PARAMS = {"name": (str, False, 'the parameter name (default "layer_idx")')}

    def planner(self) -> Planner:
        return _Planner(self)


def _with_keyword(call: cst.Call, name: str, value: cst.BaseExpression) -> cst.Call:
    """``call`` with ``name=value`` appended, following the call's layout."""
    equal = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
    arg = cst.Arg(value=value, keyword=cst.Name(name), equal=equal)
    return call.with_changes(args=append_item(list(call.args), arg, "whitespace_after_arg"))


def _has_keyword(call: cst.Call, name: str) -> bool:
    return any(a.keyword is not None and a.keyword.value == name for a in call.args)


def _passes(call: cst.Call, name: str, classes: dict) -> bool:
    """``call`` already hands the built class its ``name``: by keyword, or by position where the class's own
    ``__init__`` of the file takes it (InstructBLIP's ``QFormerLayer(config, layer_idx)``)."""
    if _has_keyword(call, name):
        return True
    owner = classes.get(code_of(call.func))
    init = owner.methods.get("__init__") if owner is not None else None
    params = init.params[1:] if init is not None and init.params[:1] == ["self"] else []
    if name not in params:
        return False
    positional = [a for a in call.args if a.keyword is None and not a.star]
    return len(positional) > params.index(name)


class _Planner(Planner):
    VISIT_EVERYTHING = True  # a rebuild outside `__init__` must be seen whatever functions the rule names

    def __init__(self, action: ThreadLayerIdx) -> None:
        super().__init__(action)
        self.name = action.param("name", "layer_idx")
        roles = action.ctx.info.roles
        self.attention = set(roles["attention"])
        self.blocks = set(roles["block"])
        self.models = set(roles["base_model"])
        self.cobuilt = self._cobuilt()

    def _cobuilt(self) -> set[str]:
        """Classes of the file that a block's ``__init__`` builds through a local that may hold an attention or a
        block instead (``attention_layer = SelfPart`` in the decoder, ``= LocalPart`` in the encoder, then
        ``attention_layer(config)``): they take the index too (and ignore it), since the call passes it."""
        inner = self.attention | self.blocks
        found = set()
        for name in self.blocks:
            for classes in self.ctx.info.classes[name].class_aliases.values():
                if set(classes) & inner:
                    found.update(c for c in classes if c in self.ctx.info.classes and c not in inner)
        return found

    def _in_init(self, classes: set[str]) -> bool:
        return self.current_class in classes and self.current_function == f"{self.current_class}.__init__"

    def _callee(self, call: cst.Call) -> str:
        """The class the call builds, by its name (one a package's module imports under another name: that class)."""
        name = code_of(call.func)
        owner = self.ctx.info.classes.get(self.current_class)
        return owner.imported.get(name, name) if owner is not None else name

    def _rebuilt_in(self, cls: str) -> bool:
        """A method of ``cls`` other than ``__init__`` builds an attention or a block (without ``layer_idx``)."""
        info = self.ctx.info.classes.get(cls)
        inner = self.attention | self.blocks
        return info is not None and any(
            code_of(call.func) in inner and not _passes(call, self.name, self.ctx.info.classes)
            for name, method in info.methods.items()
            if name != "__init__"
            for call in findall(method.node, m.Call())
        )

    def _rebuild(self, node: cst.Call) -> None:
        """An attention or block built outside ``__init__``: in a method of an attention or block (which gets
        the index in its ``__init__``) it gets ``layer_idx=self.layer_idx``; anywhere else it is reported."""
        cls, name = self.current_class, self.name
        info = self.ctx.info.classes.get(cls) if cls is not None else None
        method = info.methods.get(self.current_function.split(".")[-1]) if info is not None else None
        if (
            cls in self.attention | self.blocks
            and "__init__" in info.methods
            and len(self.function_stack) == 1
            and method is not None
            and method.params[:1] == ["self"]
        ):
            self.action.changes += 1
            value = cst.Attribute(cst.Name("self"), cst.Name(name))
            self.replace(node, lambda updated, _: _with_keyword(updated, name, value), reformat=True)
            return
        where = f"{self.current_function}" if self.current_function else "module level code"
        self.action.ctx.error(
            self.action.rule,
            self.current_function,
            f"cannot give the attention built here its layer index: {where} builds {self._callee(node)}(...) "
            f"outside `__init__` and the cache needs each layer's index, which only the `__init__` of an attention "
            f"or a block receives; build it with `{name}=` the index of the layer it belongs to, or only in `__init__`",
            node,
        )

    def _builds(self, node: cst.Call, classes: set[str]) -> bool:
        """The call builds a module of one of ``classes``: ``Attention(...)``, or ``self.attr = TABLE[key](...)``
        (or ``A(...) if c else B(...)``) where the analysis found the classes ``attr`` can be."""
        if self._callee(node) in classes:
            return True
        owner = self.ctx.info.classes.get(self.current_class)
        aliased = owner.class_aliases.get(self._callee(node), ()) if owner is not None else ()
        if set(aliased) & classes and set(aliased) <= classes | self.cobuilt:
            return True
        holder = next((n for n in reversed(self.stack[:-1]) if not isinstance(n, cst.IfExp)), None)
        if owner is None or not isinstance(holder, cst.Assign) or len(holder.targets) != 1:
            return False
        target = holder.targets[0].target
        if not m.matches(target, m.Attribute(value=m.Name("self"))):
            return False
        built = set(owner.choices.get(target.attr.value, ())) & classes
        return bool(built) and not isinstance(node.func, (cst.Name, cst.Attribute))  # a table or `(A if c else B)`

    def _appended_in_loop(self, node: cst.Call) -> None:
        """``self.layers.append(Block(...))`` (or ``layers.append(...)``) in a ``for`` over ``range`` of the base
        model's ``__init__``: the block gets ``layer_idx=<loop variable>`` (a ``_`` loop variable is renamed)."""
        if not m.matches(node, m.Call(func=m.Attribute(attr=m.Name("append")), args=[m.Arg(m.Call())])):
            return
        block = node.args[0].value
        if self._callee(block) not in self.blocks or _passes(block, self.name, self.ctx.info.classes):
            return
        loop = next((n for n in reversed(self.stack) if isinstance(n, cst.For)), None)
        if (
            loop is None
            or not m.matches(loop.iter, m.Call(func=m.Name("range")))
            or not isinstance(loop.target, cst.Name)
        ):
            self.action.ctx.error(
                self.action.rule,
                self.current_function,
                f"cannot pass `{self.name}` to {self._callee(block)}: it is not appended in a `for` over range(...)",
            )
            return
        name = self.name
        variable = name if loop.target.value == "_" else loop.target.value
        self.action.changes += 1
        self.replace(block, lambda updated, _: _with_keyword(updated, name, cst.Name(variable)), reformat=True)
        if loop.target.value == "_":  # the loop is an ancestor of this call: its target is not below the node visited
            ancestors = tuple(self.stack[: self.stack.index(loop) + 1])
            rename = Replace(self.action.rule.id, loop.target, lambda updated, _: cst.Name(name), ancestors)
            if not any(isinstance(e, Replace) and e.node is loop.target for e in self.action.edits):
                self.action.edits.append(rename)

    def _single_layer(self, node: cst.Call) -> None:
        """``self.<attr> = Block(...)`` building a one-layer model's single layer: it is layer 0."""
        owner = self.ctx.info.classes.get(self.current_class)
        holder = self.stack[-2] if len(self.stack) > 1 else None
        if owner is None or not m.matches(holder, m.Assign(targets=[m.AssignTarget(m.Attribute(m.Name("self")))])):
            return
        if owner.single_layers.get(holder.targets[0].target.attr.value) != self._callee(node):
            return
        if not _passes(node, self.name, self.ctx.info.classes):
            self.action.changes += 1
            name = self.name
            self.replace(node, lambda updated, _: _with_keyword(updated, name, cst.Integer("0")), reformat=True)

    def visit_Call(self, node: cst.Call) -> None:
        if self._in_init(self.models):
            self._appended_in_loop(node)
            self._single_layer(node)
        inner = self.attention | self.blocks  # a block may hold an attention or another block (a wrapper)
        outside_init = self.current_function is None or self.function_stack[0].split(".")[-1] != "__init__"
        if outside_init and self._callee(node) in inner and not _passes(node, self.name, self.ctx.info.classes):
            self._rebuild(node)
            return
        if (
            self._in_init(self.blocks)
            and self._builds(node, inner)
            and not _passes(node, self.name, self.ctx.info.classes)
        ):
            self.action.changes += 1
            name = self.name
            self.replace(node, lambda updated, _: _with_keyword(updated, name, cst.Name(name)), reformat=True)

    def _comprehension(self, node) -> None:
        if not self._in_init(self.models) or not isinstance(node.elt, cst.Call):
            return
        call = node.elt
        if self._callee(call) not in self.blocks or _passes(call, self.name, self.ctx.info.classes):
            return
        target = node.for_in.target
        if not isinstance(target, cst.Name) or node.for_in.inner_for_in is not None:
            self.action.ctx.error(
                self.action.rule,
                self.current_function,
                f"cannot pass `{self.name}` to {self._callee(call)}: its ModuleList loop target is not one name",
            )
            return
        self.action.changes += 1
        name = self.name
        variable = name if target.value == "_" else target.value

        def build(updated, _resolve):
            if target.value == "_":
                updated = updated.with_changes(for_in=updated.for_in.with_changes(target=cst.Name(name)))
            return updated.with_changes(elt=_with_keyword(updated.elt, name, cst.Name(variable)))

        self.replace(node, build, reformat=True)

    def visit_ListComp(self, node) -> None:
        self._comprehension(node)

    def visit_GeneratorExp(self, node) -> None:
        self._comprehension(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if len(self.function_stack) != 1 or not self._in_init(self.attention | self.blocks | self.cobuilt):
            return
        name = self.name
        if not has_parameter(node.params, name):
            self.action.changes += 1
            self.replace(node.params, lambda updated, _: add_parameter(updated, name, "None"), reformat=True)
        stores = self.current_class in self.attention or self._rebuilt_in(self.current_class)
        if stores and not findall(node, m.AssignTarget(m.Attribute(m.Name("self"), m.Name(name)))):
            self.action.changes += 1
            self.insert(node.body, len(node.body.body), [cst.parse_statement(f"self.{name} = {name}\n")])
