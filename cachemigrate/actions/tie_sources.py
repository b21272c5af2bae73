"""Which parameter each entry of a ``_tied_weights_keys`` list is tied to, read from the file's own code, as
transformers 4.x ties them (for :mod:`.tie_weights_mapping`, which writes the ``{tied: source}`` mapping of 5.x).

4.x ties in three ways, and each is read here in the coordinates of the class that does it:

- ``PreTrainedModel.tie_weights`` ties ``get_output_embeddings().weight`` to ``get_input_embeddings().weight``
  when ``config.tie_word_embeddings`` is true: the methods' ``return self.<path>`` (or ``self.<x>.get_input_
  embeddings()``), and, for a class without ``get_input_embeddings``, 4.x's default through ``base_model_prefix``;
- a ``_tie_weights`` method (4.x calls every module's): ``self._tie_or_clone_weights(self.<a>, self.<b>)`` ties
  ``<a>.weight`` to ``<b>.weight``; under ``if self.config.tie_word_embeddings:`` it is conditional, as 5.x makes
  every tie of the mapping;
- assignments ``self.<a>.bias = self.<b>`` (or ``self.<b> = self.<a>.bias``) in ``__init__`` or ``_tie_weights``,
  ``self.<a>.weight = self.<b>.weight`` among the top-level statements of ``__init__``, and a module handed to a
  sub-module as it is built (``self.encoder = Stack(config, self.shared)`` keeping it as
  ``self.embed_tokens``, or its weight): the same Parameter, whatever the config says.

The ties of the attributes built in ``__init__`` (``self.<x> = <Class of the file>(...)``, or through a local name
bound once: ``base = Class(config)``, then ``self.<x> = base``) are read in their class and prefixed with ``<x>.``; a
class given modules of the file as arguments is read as a copy holding them (:mod:`.tie_built`). A tying method's tie
of two parameters that another tie already makes one (a module handed as it is built, the output embeddings' tie) is a
re-tie, and is dropped. A tie whose target is itself tied is followed to the first parameter that is not: 5.x ties each
target once, in one pass, and reads its source as it is then.
"""

from __future__ import annotations

import dataclasses

import libcst as cst
import libcst.matchers as m

from ..traverse import findall
from .tie_built import given_classes, kept_attributes, specialized
from .tie_default import default_input_raises
from .tie_override import override_leaves_untied
from .tie_code import (
    branch_locals,
    built_after_post_init,
    built_calls,
    init_weight_assigns,
    code_of,
    is_gate,
    method_locals,
    module_attributes,
    param_path,
    reads_only_config,
    self_path,
    substituted,
    until_self_is_rebound,
    without_reties,
)
from .tie_resolve import resolve, resolve_split  # noqa: F401 - imported from here by tie_weights_mapping and tests


@dataclasses.dataclass(frozen=True)
class Tie:
    target: str  # a parameter, dotted from the class whose ties these are
    source: str
    how: str  # "embeddings" (output to input, under tie_word_embeddings), "gated", "built", "ungated", "unproven",
    # "conditional" (built only when `test` holds), "raises" (4.x's default `get_input_embeddings` raised: no tie),
    # "untied" (an override of `tie_weights` that cannot reach the output embeddings: no tie at this level)
    why: str  # the code, for messages
    test: str = ""  # a conditional tie's test, as code that the class's `__init__` can read ("" when it cannot)
    by_weight: bool = False  # handed as a weight (`self.x.weight = given.weight`), not as the module itself


class TieSources:
    """The ties of the classes of one module."""

    def __init__(self, module: cst.Module) -> None:
        self.classes = {s.name.value: s for s in module.body if isinstance(s, cst.ClassDef)}

    # -- classes, methods, attributes ---------------------------------------------------------------------------

    def mro(self, name: str) -> list[cst.ClassDef]:
        return self._mro(name)

    @staticmethod
    def class_assigns(cls: cst.ClassDef, attribute: str) -> bool:
        target = m.SimpleStatementLine([m.Assign([m.AssignTarget(m.Name(attribute))])])
        return any(m.matches(stmt, target) for stmt in cls.body.body)

    def _mro(self, name: str, seen: tuple = ()) -> list[cst.ClassDef]:
        cls = self.classes.get(name)
        if cls is None or name in seen:
            return []
        found = [cls]
        for base in cls.bases:
            if isinstance(base.value, cst.Name):
                found += [c for c in self._mro(base.value.value, seen + (name,)) if c not in found]
        return found

    def method(self, name: str, method: str) -> cst.FunctionDef | None:
        for cls in self._mro(name):
            for stmt in cls.body.body:
                if isinstance(stmt, cst.FunctionDef) and stmt.name.value == method:
                    return stmt
        return None

    def class_string(self, name: str, attribute: str) -> str | None:
        target = m.SimpleStatementLine([m.Assign([m.AssignTarget(m.Name(attribute))], m.SimpleString())])
        for cls in self._mro(name):
            for stmt in cls.body.body:
                if m.matches(stmt, target):
                    return stmt.body[0].value.evaluated_value
        return None

    def attributes(self, name: str) -> dict[str, str]:
        """``x`` -> the class of the file built by ``self.x = Class(...)`` in ``__init__`` (or through a local name
        bound once: ``base = Class(...)`` then ``self.x = base``)."""
        init = self.method(name, "__init__")
        built = {}
        for attribute, call in built_calls(init):
            cls = call.func.value
            if cls in self.classes:
                built[attribute] = self._built_with(cls, init, call)
            else:
                built.pop(attribute, None)
        return built

    def _built_with(self, cls: str, caller: cst.FunctionDef, call: cst.Call) -> str:
        """``cls``, or a copy of it in which the modules of the file that ``call`` gives it are the attributes that
        keep them (:mod:`.tie_built`), registered as ``cls[attribute=Class,...]``."""
        callee = next(
            (s for s in self.classes[cls].body.body if m.matches(s, m.FunctionDef(m.Name("__init__")))), None
        )
        known = kept_attributes(callee, given_classes(self.classes, caller, call, callee)) if callee else {}
        if not known:
            return cls
        name = f"{cls}[{','.join(f'{a}={c}' for a, c in sorted(known.items()))}]"
        if name not in self.classes:
            self.classes[name] = specialized(self.classes[cls], known, self._is_a)
        return name

    def _is_a(self, name: str, other: str) -> bool | None:
        """Whether a ``name`` is an ``other`` (both classes of the file), or None when ``other`` is not one."""
        return other in {c.name.value for c in self._mro(name)} if other in self.classes else None

    def _modules(self, name: str) -> set[str]:
        """The attributes the ``__init__`` of ``name`` (or of a base in the file) sets to a built module: ``self.x =
        C(...)`` with ``C`` a class name (``nn.Embedding``, ``Embedding``), or a local bound once to such a call."""
        return {attr for cls in self._mro(name) for attr in module_attributes(self.method(cls.name.value, "__init__"))}

    def _handed(self, name: str) -> list[Tie]:
        """Modules handed to a sub-module as it is built: ``self.x = Class(config, self.shared)`` where
        ``Class.__init__`` keeps that parameter (``self.embed_tokens = embed_tokens``) or its weight
        (``self.embed_tokens.weight = embed_tokens.weight``): ``x.embed_tokens.weight`` is ``shared.weight``."""
        init = self.method(name, "__init__")
        modules = self._modules(name)
        ties = []
        for attribute, call in built_calls(init):
            cls = call.func.value
            callee = self.method(cls, "__init__") if cls in self.classes else None
            if callee is None:
                continue
            params = [p.name.value for p in callee.params.params][1:]  # after self
            given, under = {}, {}
            branches = branch_locals(init)
            for index, arg in enumerate(call.args):
                if arg.star:
                    break
                key = arg.keyword.value if arg.keyword is not None else params[index] if index < len(params) else None
                path = self_path(arg.value)
                if isinstance(arg.value, cst.Name) and arg.value.value in branches:  # a local bound per a test
                    path, under[key] = branches[arg.value.value]
                if key and path and path.split(".")[0] in modules:  # a module, not `self.padding_idx`/`self.config`
                    given[key] = path
            for assign in findall(callee, m.Assign()) if given else ():
                if len(assign.targets) != 1:
                    continue
                left, right = self_path(assign.targets[0].target), param_path(assign.value)
                if left is None or right is None or right[0] not in given:
                    continue
                kept, suffix = given[right[0]], right[1]
                if not suffix and "." not in left:  # self.embed_tokens = embed_tokens
                    target, source, by_weight = f"{left}.weight", f"{kept}.weight", False
                elif suffix == "weight" and left.endswith(".weight"):  # self.embed_tokens.weight = embed_tokens.weight
                    target, source, by_weight = left, f"{kept}.weight", True
                else:
                    continue
                why = f"`self.{attribute} = {cls}(..., self.{kept})` keeping it in `{cls}.__init__`"
                test = under.get(right[0])
                if test is not None:
                    why = (
                        f"`{name}.__init__` hands `self.{kept}` to `{cls}` as `self.{attribute}` only when "
                        f"`{test}` is true, and a class's `_tied_weights_keys` cannot follow that test: set "
                        "`self._tied_weights_keys` in `__init__` under it, before `self.post_init()`"
                    )
                ties.append(Tie(f"{attribute}.{target}", source, "conditional" if test else "built", why,
                                test if reads_only_config(test) else "", by_weight))  # fmt: skip
        return ties

    def built_ties(self, name: str) -> list[Tie]:
        """The ties class ``name``'s own ``__init__`` makes by handing a module to a sub-module as it is built (always,
        or under a test of the config): the same Parameter under two names, whatever the mapping says."""
        return self._handed(name)

    def _returned(self, name: str, method: str, depth: int) -> str | None:
        """The dotted path of what ``method`` of class ``name`` returns, when it is one ``return``."""
        fn = self.method(name, method)
        if fn is None:
            return None
        returns = findall(fn, m.Return())
        if len(returns) != 1 or returns[0].value is None:
            return None
        return self.path_of(name, returns[0].value, depth + 1)

    def path_of(self, name: str, node: cst.BaseExpression, depth: int = 0) -> str | None:
        """``self.a.b`` -> ``a.b``; ``self.get_input_embeddings()`` and ``self.x.get_input_embeddings()`` -> the
        input embeddings of that class (the same for ``get_output_embeddings``)."""
        if depth > 8:
            return None
        path = self_path(node)
        if path is not None:
            return path
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Call):  # self.get_x().weight
            owner = self.path_of(name, node.value, depth + 1)
            return f"{owner}.{node.attr.value}" if owner else None
        if m.matches(node, m.Call(m.Attribute(), args=[])):  # self.<m>(), self.x.<m>(), self.get_decoder().<m>()
            owner, method = node.func.value, node.func.attr.value
            if method == "get_input_embeddings":
                find = self.input_embeddings
            elif method == "get_output_embeddings":
                find = self._output
            else:
                find = lambda cls, d: self._returned(cls, method, d)  # noqa: E731 - a method that returns a path
            if m.matches(owner, m.Name("self")):
                return find(name, depth + 1)
            prefix = self.path_of(name, owner, depth + 1)
            child = self.class_at(name, prefix) if prefix else None
            inner = find(child, depth + 1) if child else None
            return f"{prefix}.{inner}" if inner else None
        return None

    def class_at(self, name: str, path: str) -> str | None:
        """The class of the file built at the dotted ``path`` of class ``name`` (``model.decoder``)."""
        for part in path.split("."):
            name = self.attributes(name).get(part) if name else None
        return name

    def _output(self, name: str, depth: int) -> str | None:
        return self._returned(name, "get_output_embeddings", depth) if depth < 8 else None

    def is_pretrained(self, name: str) -> bool:
        """Whether class ``name`` derives (through the classes of the file) from a ``...PreTrainedModel``."""
        for cls in self._mro(name):
            for base in cls.bases:
                base_name = base.value.value if isinstance(base.value, cst.Name) else getattr(base.value, "attr", None)
                base_name = base_name.value if isinstance(base_name, cst.Name) else base_name
                if isinstance(base_name, str) and base_name not in self.classes:
                    if base_name.lower().endswith("pretrainedmodel"):
                        return True
        return False

    def input_embeddings(self, name: str, depth: int = 0) -> str | None:
        """What ``get_input_embeddings`` of class ``name`` returns, or 4.x's default: that of the attribute named
        by ``base_model_prefix``."""
        if self.method(name, "get_input_embeddings") is not None:
            return self._returned(name, "get_input_embeddings", depth)
        prefix = self.class_string(name, "base_model_prefix")
        child = self.attributes(name).get(prefix) if prefix else None
        inner = self.input_embeddings(child, depth + 1) if child and depth < 8 else None
        return f"{prefix}.{inner}" if inner else None

    def output_embeddings(self, name: str) -> str | None:
        return self._returned(name, "get_output_embeddings", 0)

    # -- ties ------------------------------------------------------------------------------------------------------

    def own_ties(self, name: str) -> list[Tie]:
        """The ties class ``name`` makes itself (not those of its output embeddings)."""
        ties = []
        init = self.method(name, "__init__")
        for assign in findall(init, m.Assign()) if init is not None else ():
            ties += self._bias_tie(assign, "built")
        for left, right, code in init_weight_assigns(init):  # one Parameter from construction
            ties.append(Tie(left, right, "built", f"`{code}` in `__init__`"))
        for method in ("_tie_weights", "tie_weights"):  # 4.x called every module's `_tie_weights`; an override
            tie = self.method(name, method)  # of `tie_weights` replaced 4.x's own (it runs on 5.x too: CM427)
            if tie is not None:
                ties += self._statements(
                    name, until_self_is_rebound(tie.body.body), gated=False, local=method_locals(tie)
                )
        return ties

    def _statements(self, name: str, body, gated: bool, local: dict) -> list[Tie]:
        """The ties of a method's statements; ``local`` holds the method's names assigned once (``output_embeddings =
        self.get_output_embeddings()``), read as what they were assigned."""
        ties = []
        for stmt in body:
            if isinstance(stmt, cst.If):
                inner = gated or is_gate(stmt.test)
                ties += self._statements(name, stmt.body.body, inner, local)
                orelse = stmt.orelse
                while orelse is not None:
                    block = orelse.body.body if isinstance(orelse, (cst.If, cst.Else)) else []
                    ties += self._statements(name, block, gated, local)
                    orelse = orelse.orelse if isinstance(orelse, cst.If) else None
            elif isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, cst.Assign):
                        ties += self._assigned_tie(name, substituted(small, local), gated)
                    elif isinstance(small, cst.Expr) and m.matches(small.value, TIE_CALL):
                        args = substituted(small.value, local).args
                        target, source = (self.path_of(name, a.value) for a in args)
                        if target and source:
                            why = "`self._tie_or_clone_weights(...)` in `_tie_weights`"
                            ties.append(Tie(f"{target}.weight", f"{source}.weight", "gated" if gated else "ungated",
                                            why))  # fmt: skip
        return ties

    def _assigned_tie(self, name: str, assign: cst.Assign, gated: bool) -> list[Tie]:
        """``self.x.bias = self.y`` (:meth:`_bias_tie`, whatever the config says), or one parameter given another's
        in a tying method: ``self.a.weight = self.b.weight`` (or through the getters), under the gate or not."""
        found = self._bias_tie(assign, "ungated")
        if found or len(assign.targets) != 1:
            return found
        left, right = self.path_of(name, assign.targets[0].target), self.path_of(name, assign.value)
        if not left or not right or left.rsplit(".", 1)[-1] not in ("weight", "bias"):
            return []
        if right.rsplit(".", 1)[-1] != left.rsplit(".", 1)[-1]:
            return []
        return [Tie(left, right, "gated" if gated else "ungated", f"`{code_of(assign)}` in a tying method")]

    @staticmethod
    def _bias_tie(assign: cst.Assign, how: str) -> list[Tie]:
        if len(assign.targets) != 1:
            return []
        left, right = self_path(assign.targets[0].target), self_path(assign.value)
        if not left or not right:
            return []
        why = f"`self.{left} = self.{right}`"
        if left.endswith(".bias") and "." not in right:  # self.decoder.bias = self.bias
            return [Tie(left, right, how, why)]
        if right.endswith(".bias") and "." not in left:  # self.bias = self.decoder.bias
            return [Tie(right, left, how, why)]
        return []

    def _posts_init(self, name: str) -> bool:
        init = self.method(name, "__init__")
        call = m.Call(m.Attribute(m.Name("self"), m.Name("post_init")))
        return init is not None and bool(findall(init, call))

    def ties(self, name: str, top: bool = True, depth: int = 0) -> list[Tie]:
        """Every tie in the tree of class ``name``, dotted from it. The output embeddings are tied (by 4.x's
        ``tie_weights``) for the class itself, and for a sub-model that calls ``self.post_init()`` (which ties them as
        it is built)."""
        ties = list(self.own_ties(name))
        output = self.output_embeddings(name) if top or self._posts_init(name) else None
        if output is not None:
            source = self.input_embeddings(name)
            if self.method(name, "tie_weights") is not None:  # its ties are read as own ties
                if not any(t.target == f"{output}.weight" for t in ties):
                    # an override that cannot reach them never tied them (:mod:`.tie_override`)
                    how = "untied" if override_leaves_untied(self, name, output) else "unproven"
                    why = f"`{name}` overrides `tie_weights`, which 4.x used to tie `get_output_embeddings` to `get_input_embeddings`, and no tie of its code that this reads ties `{output}.weight`"
                    ties.append(Tie(f"{output}.weight", "", how, why))
            elif source is None and default_input_raises(self, name) is not None:
                why = (
                    f"`get_input_embeddings` of `{name}` is `PreTrainedModel`'s, which raises NotImplementedError: "
                    f"`{default_input_raises(self, name)}`, where its `base_model_prefix` chain ends, defines none "
                    "and has no attribute named by `base_model_prefix`"
                )
                ties.append(Tie(f"{output}.weight", "", "raises", why))
            elif source is None:
                why = f"`get_input_embeddings` of `{name}` (or of its `base_model_prefix` attribute) returns no `self.<path>`"
                ties.append(Tie(f"{output}.weight", "", "unproven", why))
            else:
                why = "`get_output_embeddings` tied to `get_input_embeddings` by `tie_weights`"
                ties.append(Tie(f"{output}.weight", f"{source}.weight", "embeddings", why))
        ties += self._handed(name)
        if depth < 8:
            for attribute, cls in self.attributes(name).items():
                if self._posts_init(cls) and built_after_post_init(self.method(name, "__init__"), attribute):
                    continue  # it ties itself as it is built; 5.x ties it again from its own mapping
                given = self._passes_config(name, attribute)
                for tie in self.ties(cls, top=False, depth=depth + 1):
                    test = tie.test if given and reads_only_config(tie.test) else ""  # readable here too
                    ties.append(dataclasses.replace(tie, target=f"{attribute}.{tie.target}",
                                                    source=f"{attribute}.{tie.source}", test=test))  # fmt: skip
        return without_reties(ties) if depth == 0 else ties

    def _passes_config(self, name: str, attribute: str) -> bool:
        """Whether ``__init__`` of class ``name`` builds ``self.<attribute>`` with its own ``config`` as the first
        argument (so a test of ``config`` in the sub-model reads the same object)."""
        init = self.method(name, "__init__")
        target = m.AssignTarget(m.Attribute(m.Name("self"), m.Name(attribute)))
        given = m.Arg(m.Name("config"), keyword=None) | m.Arg(m.Name("config"), keyword=m.Name("config"))
        built = findall(init, m.Assign([target], m.Call(m.Name(), args=[given, m.ZeroOrMore()]))) if init else []
        return len(built) == 1 and len(findall(init, m.Assign([target]))) == 1


TIE_CALL = m.Call(
    m.Attribute(m.Name("self"), m.Name("_tie_or_clone_weights")),
    args=[m.Arg(keyword=None), m.Arg(keyword=None)],
)
