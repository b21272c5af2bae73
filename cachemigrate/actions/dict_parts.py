"""``dict_parts``: a past kept as one dict per layer with a dict per attention part (fairseq style,
:mod:`cachemigrate.facts.dict_layout`) moved onto an ``EncoderDecoderCache``, driven by the layout's facts.

The parts are an ``EncoderDecoderCache``'s roles: the self part is its ``self_attention_cache``, the cross part
(the one the written-once switch is on for) its ``cross_attention_cache``, written once and marked in
``is_updated``. What the action plans, each at the construct the facts name:

- the attention takes ``layer_idx`` (``self.layer_idx``), as do the classes that build it and hand it the
  layer's dict; the stack builds its blocks with their index;
- the attention's read of its part (``saved = state.get(self.key, {})``) becomes the cross part's keys and values
  once written (``cross_keys`` / ``cross_values``: this era's reads), an empty part otherwise, so the attention's
  own merge (``torch.cat`` with the part it holds) has nothing to merge; its write of the part becomes the
  Cache's ``update``: the self part's returns the whole keys and values, viewed back in the layout the attention
  reads them in; the cross part is written once;
- the ``{}`` put in for a missing dict (the attention's, the block's) goes: the write is under ``if <dict> is not
  None``;
- the stack hands every block the whole Cache (the pick of one layer's dict goes); ``setup`` turns a list of dicts
  handed in into the Cache (the parts read in the 4-tuple order, ``legacy``) and ``give_back`` gives one back
  where one came in, as dicts of parts (the other fields of a part, proven dead, as None);
- the beam reorder reorders a Cache through its ``reorder_cache`` (``reorder``) and keeps walking the dicts
  otherwise.

The file's ``PreTrainedModel`` and its heads take the era's rules for them (``_supports_cache_class``,
``cache_position``, ``GenerationMixin``, 5.x's ``cache=``: :func:`cachemigrate.facts.dict_blocker.dict_roles`).

Holes the templates use: ``{cache}`` (the model's cache variable), ``{dict}`` (the attention's parameter that holds
it), ``{static}`` (the switch's local), ``{key}`` / ``{value}`` (the tensors as stored), ``{k}`` / ``{v}`` (their
names), ``{merge}`` (the view back to the layout read), ``{legacy}`` / ``{self_pair}`` / ``{cross_pair}`` (one
layer's dict read as tuples, named ``layer``), ``{as_dict}`` (one layer's dict built from ``self_keys``,
``self_values``, ``cross_keys``, ``cross_values``), ``{collected}`` (the list of dicts the stack gives back),
``{arg0}`` / ``{arg1}`` (the reorder's past and beam order).
"""

from __future__ import annotations

import textwrap

import libcst as cst
import libcst.matchers as m

from ..edit.edits import Replace, Splice, remove
from ..facts.dict_blocker import why_not
from ..facts.dict_layout import DictLayout, find
from ..traverse import findall
from ..views.patterns import to_python
from .base import Action, descend
from .helpers import append_item

TEMPLATES = ("cross_keys", "cross_values", "setup", "give_back", "write", "reorder")


class DictParts(Action):
    name = "dict_parts"
    PARAMS = {key: (str, True, "a template (see cachemigrate/actions/dict_parts.py)") for key in TEMPLATES}

    @classmethod
    def check_params(cls, rule, check) -> None:
        for key in ("setup", "give_back", "write", "reorder"):
            try:
                cst.parse_module(to_python(textwrap.dedent(rule.params[key]).strip() + "\n"))
            except cst.ParserSyntaxError as exc:
                raise check.fail(f"params.{key}", f"Python statements ({exc.message})") from None

    def plan(self, module: cst.Module) -> list:
        info = self.ctx.info
        uses = info.legacy_uses()
        layout = find(module, info, uses[0].variable) if uses else None
        if layout is None or why_not(info, layout) is not None:
            return self.edits
        _Plan(self, module, layout).build()
        return self.edits


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _fill(template: str, values: dict) -> str:
    text = textwrap.dedent(template).strip() + "\n"
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text


class _Plan:
    def __init__(self, action: DictParts, module: cst.Module, layout: DictLayout) -> None:
        self.action, self.module, self.layout = action, module, layout
        self.info, self.rule = action.ctx.info, action.rule.id

    # -- edits -------------------------------------------------------------------------------------------------
    def _path(self, node) -> tuple:
        """The ancestors of ``node``, from the module down (exclusive), as edits name them."""
        return (self.module, *(descend(self.module, node) or ()))

    def replace(self, node, build, reformat: bool = False) -> None:
        self.action.edits.append(Replace(self.rule, node, build, self._path(node), reformat=reformat))
        self.action.changes += 1

    def splice(self, block, index: int, count: int, statements) -> None:
        self.action.edits.append(Splice(self.rule, block, index, count, lambda _: list(statements), self._path(block)))
        self.action.changes += 1

    def statements(self, template: str, values: dict, depth: int) -> list:
        code = self.action.ctx.format_statements(_fill(template, values), depth)
        return list(cst.parse_module(code).body)

    def line_of(self, node) -> tuple[cst.CSTNode, cst.CSTNode, int]:
        """The statement holding ``node`` (or ``node`` itself): (its block, the statement, its index there)."""
        chain = (*(self._path(node) or ()), node)
        for depth in range(len(chain) - 1, 0, -1):
            stmt, block = chain[depth], chain[depth - 1]
            body = getattr(block, "body", None)
            if (
                isinstance(stmt, cst.BaseStatement)
                and isinstance(body, (tuple, list))
                and any(s is stmt for s in body)
            ):
                return block, stmt, next(i for i, s in enumerate(body) if s is stmt)
        raise LookupError(node)

    # -- the plan ----------------------------------------------------------------------------------------------
    def build(self) -> None:
        layout, info = self.layout, self.info
        attention = layout.attention
        fn = next(f for f in info.functions.values() if any(a is layout.pick for a in findall(f.node, m.Assign())))
        loop = next((p for p in reversed(self._path(layout.pick)) if isinstance(p, cst.For)), None)
        collected = self._collected(fn, loop) if loop is not None else None
        if collected is None or "use_cache" not in fn.params:
            self.action.ctx.error(
                self.action.rule,
                fn.qualname,
                f"{fn.qualname} picks one layer's dict of `{layout.cache}` (`{_code(layout.pick).strip()}`), but not "
                "in a loop over its blocks that takes `use_cache` and appends each block's dict to a list it gives "
                "back: the rule cannot tell where the Cache is set up and given back; the file was left unchanged",
                layout.pick,
            )
            return
        self._take_layer_idx(f"{attention}.__init__", store=True)
        builders = self._builders()
        for cls in builders:
            self._take_layer_idx(f"{cls}.__init__", store=False)
            for call in findall(info.functions[f"{cls}.__init__"].node, m.Call(func=m.Name(attention))):
                self._pass_layer_idx(call, "layer_idx")
            self._drop_empty_default(info.functions[f"{cls}.forward"])
        self._index_blocks(builders)
        self._attention()
        self._stack(fn, loop, collected)
        self._reorder()

    def _take_layer_idx(self, qualname: str, store: bool) -> None:
        fn = self.info.functions[qualname].node
        params = fn.params
        new = cst.Param(
            cst.Name("layer_idx"),
            default=cst.Name("None"),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        )
        self.replace(
            params,
            lambda updated, _: updated.with_changes(
                params=append_item(list(updated.params), new, "whitespace_after_param")
            ),
        )
        if store:
            body = fn.body
            line = cst.parse_statement("self.layer_idx = layer_idx\n")
            self.splice(body, len(body.body), 0, [line])

    def _pass_layer_idx(self, call: cst.Call, value: str) -> None:
        arg = cst.Arg(
            cst.Name(value),
            keyword=cst.Name("layer_idx"),
            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
        )
        self.replace(
            call,
            lambda updated, _: updated.with_changes(args=append_item(list(updated.args), arg, "whitespace_after_arg")),
            reformat=True,
        )

    def _builders(self) -> list[str]:
        """Classes that build the attention in ``__init__`` and hand it the layer's dict in ``forward``."""
        found = []
        for cls in self.info.classes:
            init, forward = self.info.functions.get(f"{cls}.__init__"), self.info.functions.get(f"{cls}.forward")
            if cls == self.layout.attention or init is None or forward is None:
                continue
            if findall(init.node, m.Call(func=m.Name(self.layout.attention))) and findall(
                forward.node, m.Call(args=[m.ZeroOrMore(), m.Arg(keyword=m.Name(self.layout.carrier)), m.ZeroOrMore()])
            ):
                found.append(cls)
        return found

    def _drop_empty_default(self, fn) -> None:
        """``if d is None: d = {}`` (a block's) goes: a missing dict stays None, the attention writes nothing."""
        for node in findall(
            fn.node,
            m.If(
                test=m.Comparison(left=m.Name(), comparisons=[m.ComparisonTarget(m.Is(), m.Name("None"))]), orelse=None
            ),
        ):
            name = node.test.left.value
            empty = m.SimpleStatementLine(
                body=[m.Assign(targets=[m.AssignTarget(m.Name(name))], value=m.Dict(elements=[]))]
            )
            if len(node.body.body) == 1 and m.matches(node.body.body[0], empty):
                self.replace(node, remove)

    def _index_blocks(self, builders: list[str]) -> None:
        for cls in self.info.classes:
            init = self.info.functions.get(f"{cls}.__init__")
            if init is None:
                continue
            for comp in findall(
                init.node,
                m.ListComp(elt=m.Call(func=m.Name(m.MatchIfTrue(lambda n: n in builders))))
                | m.GeneratorExp(elt=m.Call(func=m.Name(m.MatchIfTrue(lambda n: n in builders)))),
            ):
                target = comp.for_in.target
                if not isinstance(target, cst.Name):
                    continue
                name = "layer_idx" if target.value == "_" else target.value
                self._pass_layer_idx(comp.elt, name)
                if target.value == "_":
                    self.replace(target, lambda updated, _: updated.with_changes(value="layer_idx"))

    def _attention(self) -> None:
        layout, params = self.layout, self.action.rule.params
        fn = self.info.functions[layout.forward]
        carrier = layout.carrier
        key, value = layout.field("key"), layout.field("value")
        holes = {"dict": carrier, "part": f"{carrier}.cross_attention_cache", "idx": "self.layer_idx"}
        cross_k, cross_v = _fill(params["cross_keys"], holes).strip(), _fill(params["cross_values"], holes).strip()
        read = (
            f'{{"{key.name}": {cross_k}, "{value.name}": {cross_v}}} '
            f"if {layout.static} and {carrier}.is_updated.get(self.layer_idx) else {{}}"
        )
        saved = m.Assign(
            targets=[m.AssignTarget(m.Name(layout.saved))],
            value=m.Call(func=m.Attribute(value=m.Name(carrier), attr=m.Name("get")))
            | m.Subscript(value=m.Name(carrier)),
        )
        for node in findall(fn.node, saved)[:1]:
            self.replace(node.value, lambda updated, _: cst.parse_expression(read), reformat=True)
        empty = m.SimpleStatementLine(
            body=[m.Assign(targets=[m.AssignTarget(m.Name(carrier))], value=m.Dict(elements=[]))]
        )
        for line in findall(fn.node, empty):  # the only statement of its block: `pass` keeps the block
            alone = len(self.line_of(line)[0].body) == 1
            self.replace(line, (lambda updated, _: cst.SimpleStatementLine([cst.Pass()])) if alone else remove)
        block, stmt, index = self.line_of(layout.write)
        k, v = key.written.func.value.value, value.written.func.value.value
        merge = ".flatten(0, 1)" if key.used is not None and key.used != key.stored else ""
        values = {
            "dict": carrier,
            "static": layout.static,
            "key": _code(key.written),
            "value": _code(value.written),
            "k": k,
            "v": v,
            "merge": merge,
            "idx": "self.layer_idx",
        }
        depth = len([p for p in (self._path(stmt) or ()) if isinstance(p, cst.IndentedBlock)])
        written = self.statements(params["write"], values, depth)
        written[0] = written[0].with_changes(leading_lines=stmt.leading_lines)  # its comment stays with it
        self.splice(block, index, 1, written)

    def _stack(self, fn, loop, collected) -> None:
        layout, params = self.layout, self.action.rule.params
        cache = layout.cache
        self.replace(layout.pick.value, lambda updated, _: cst.Name(cache))
        block, _, index = self.line_of(loop)
        depth = len([p for p in (self._path(loop) or ()) if isinstance(p, cst.IndentedBlock)])
        order = layout.legacy_order()
        reads = [f'layer["{part}"]["{name}"]' for part, name in order]
        values = {
            "cache": cache,
            "legacy": f"({', '.join(reads)})",
            "self_pair": f"({reads[0]}, {reads[1]})",
            "cross_pair": f"({reads[2]}, {reads[3]})",
        }
        setup = self.statements(params["setup"], values, depth)
        name, append = collected
        parts = {}
        for (part, field), held in zip(order, ("self_keys", "self_values", "cross_keys", "cross_values")):
            parts.setdefault(part, []).append(f'"{field}": {held}')
        for part in parts.values():
            part.extend(f'"{f.name}": None' for f in layout.extras())
        values["as_dict"] = "{" + ", ".join(f'"{p}": {{{", ".join(fs)}}}' for p, fs in parts.items()) + "}"
        values["collected"] = name
        give_back = self.statements(params["give_back"], values, depth)
        self.splice(block, index, 0, setup)
        self.splice(block, index + 1, 0, give_back)
        self.replace(append, remove)

    def _collected(self, fn, loop) -> tuple[str, cst.CSTNode] | None:
        """The list the stack appends each block's dict to, and the statement that appends it (or the ``if`` that
        holds only that statement)."""
        per_layer = self.layout.per_layer
        bound = set()
        for assign in findall(loop.body, m.Assign(value=m.Call())):
            if any(m.matches(a.value, m.Name(per_layer)) for a in assign.value.args):
                for target in assign.targets:
                    bound |= {n.value for n in findall(target.target, m.Name())}
        lists = {
            a.targets[0].target.value
            for a in findall(fn.node, m.Assign(targets=[m.AssignTarget(m.Name())], value=m.List(elements=[])))
        }
        for call in findall(loop.body, m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("append")))):
            held = call.args[0].value if call.args else None
            base = held.func.value if m.matches(held, m.Call(func=m.Attribute(attr=m.Name("copy")))) else held
            if call.func.value.value in lists and isinstance(base, cst.Name) and base.value in bound:
                _, stmt, _ = self.line_of(call)
                path = self._path(stmt) or ()
                holder = next((p for p in reversed(path) if isinstance(p, cst.If)), None)
                if (
                    holder is not None
                    and holder.orelse is None
                    and len(holder.body.body) == 1
                    and holder.body.body[0] is stmt
                ):
                    stmt = holder
                return call.func.value.value, stmt
        return None

    def _reorder(self) -> None:
        if self.layout.reorder is None:
            return
        fn = self.info.functions[self.layout.reorder]
        args = [p.name.value for p in fn.node.params.params if p.name.value not in ("self", "cls")]
        if len(args) < 2:
            return
        body = fn.node.body
        index = (
            1 if body.body and m.matches(body.body[0], m.SimpleStatementLine(body=[m.Expr(m.SimpleString())])) else 0
        )
        depth = len([p for p in (self._path(body) or ()) if isinstance(p, cst.IndentedBlock)]) + 1
        self.splice(
            body,
            index,
            0,
            self.statements(self.action.rule.params["reorder"], {"arg0": args[0], "arg1": args[1]}, depth),
        )
