"""``edit_cache_consumer``: the constructs of a function that reads or edits a past outside a model
(:mod:`cachemigrate.facts.consumers`), rewritten for a ``Cache`` with the tuple code kept for tuples.

* ``length`` (``past[i][0].shape[2]``) and ``layer`` (``past[i][0]``): the expression becomes
  ``<the rule's code> if isinstance(past, Cache) else <the expression as written>``;
* ``rollback`` and ``window`` (a per-layer rebuild): a branch ``if isinstance(past, Cache):`` placed before the
  rebuild edits the Cache in place (the rule's ``crop``, or its ``keys`` / ``values`` / ``write`` per layer) and
  gives it back the way the rebuild gave the tuple back (``return``, or the same assignment); the rebuild stays for
  tuples.

A slice or concatenation on another axis than the sequence, a length read off another axis, or a rebuild that is
not only such edits is reported at its line with the rule's id, and nothing of it changes.
"""

from __future__ import annotations

from typing import ClassVar

import libcst as cst
import libcst.matchers as m

from ..facts.consumers import (
    SEQUENCE_AXES,
    layer_read,
    length_read,
    pair_read,
    pairs_loop,
    rebuilds,
)
from ..facts.uses import CACHE_GUARD
from ..traverse import findall
from .base import Action, Planner
from .replace_expression import LOOSE, _is_operand
from .where import is_a

CONSTRUCTS = ("length", "layer", "rollback", "window", "iterate")
_AXES = {0: "the batch", 1: "the heads", 3: "the head dimension", -1: "the head dimension", -3: "the heads"}


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _fill(template: str, values: dict[str, str]) -> str:
    for hole, value in values.items():
        template = template.replace("{" + hole + "}", value)
    return template


def _returns_for_cache(stmt: cst.CSTNode) -> bool:
    """``if isinstance(x, Cache): ... return ...`` (no else): what follows it in the block only tuples reach."""
    return (
        isinstance(stmt, cst.If)
        and stmt.orelse is None
        and m.matches(stmt.test, CACHE_GUARD)
        and m.matches(stmt.body.body[-1], m.SimpleStatementLine(body=[m.Return()]))
    )


class EditCacheConsumer(Action):
    name = "edit_cache_consumer"
    PARAMS: ClassVar[dict] = {
        "construct": (str, True, f"one of {', '.join(CONSTRUCTS)}"),
        "length": (str, False, 'code for a layer\'s sequence length, e.g. "{cache}.get_seq_length({layer})"'),
        "keys": (str, False, 'code for a layer\'s keys, e.g. "{cache}.layers[{layer}].keys"'),
        "values": (str, False, 'code for a layer\'s values, e.g. "{cache}.layers[{layer}].values"'),
        "crop": (str, False, 'a statement keeping what `[:, :, :end]` keeps, e.g. "{cache}.crop({end})"'),
        "write": (str, False, "a statement giving layer {layer} the tensors {new_keys} and {new_values}"),
        "pairs": (str, False, 'an iterable of each layer\'s (keys, values), e.g. "cache_layer_pairs({cache})"'),
    }
    NEEDS: ClassVar[dict] = {
        "length": ("length",),
        "layer": ("keys", "values"),
        "rollback": ("crop",),
        "window": ("keys", "values", "write"),
        "iterate": ("pairs",),
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        construct = check.choice("params.construct", CONSTRUCTS)
        for key in cls.NEEDS[construct]:
            check.get(f"params.{key}", str, f"the code of a {construct} construct")

    def planner(self) -> Planner:
        return _Planner(self)


class _Planner(Planner):
    ENTERS_TRIVIA = False  # enter() looks at expressions, statements and blocks only

    def __init__(self, action: EditCacheConsumer) -> None:
        super().__init__(action)
        self.construct = action.param("construct")
        self.guarded: set[cst.CSTNode] = set()

    @property
    def cache(self) -> str:
        return self.ctx.info.functions[self.current_function].cache_params[0]

    def enter(self, node) -> bool:
        if self.guarded and node in self.guarded:
            return False
        if is_a(node, cst.IfExp) and m.matches(node.test, CACHE_GUARD):
            self.guarded.add(node.orelse)  # already the tuple branch of a migrated read
        if is_a(node, cst.If) and m.matches(node.test, CACHE_GUARD):
            return False  # already a Cache branch
        if is_a(node, cst.IndentedBlock):  # after `if isinstance(past, Cache): ... return`: tuples only
            ends = [i for i, stmt in enumerate(node.body) if _returns_for_cache(stmt)]
            self.guarded.update(node.body[ends[0] + 1 :] if ends else ())
        if not self.in_function_scope() or len(self.function_stack) != 1:
            return True
        if self.construct in ("rollback", "window") and is_a(node, cst.IndentedBlock):
            self._rebuilds(node)
        elif self.construct == "iterate" and is_a(node, cst.IndentedBlock):  # rebuilds are CM502/CM503's
            for rebuild in rebuilds(node, self.cache):
                self.guarded.update(node.body[rebuild.index : rebuild.index + rebuild.count])
        elif self.construct == "iterate" and is_a(node, (cst.For, cst.CompFor)):
            self._iteration(node)
        elif self.construct in ("length", "layer") and is_a(node, cst.BaseExpression):
            return self._expression(node)
        return True

    # -- expressions ------------------------------------------------------------------------------------------

    def _expression(self, node: cst.BaseExpression) -> bool:
        cache = self.cache
        read = length_read(node, cache)
        if self.construct == "length" and read is not None:
            if read.axis not in SEQUENCE_AXES:
                where = _AXES.get(read.axis, "an axis it cannot tell") if read.axis is not None else "a computed axis"
                self.ctx.error(
                    self.action.rule,
                    self.current_function,
                    f"`{_code(node)}` reads {where} of a layer's cached tensor, not its sequence length (axis 2 of "
                    "[batch, heads, seq, head_dim], the only layout a Cache holds): not rewritten; the file was "
                    "left unchanged",
                    node,
                )
                return False
            code = _fill(self.action.param("length"), {"cache": cache, "layer": _code(read.layer)})
            self._guarded_replace(node, code)
            return False
        if self.construct == "layer":
            if read is not None:
                return False  # the length rule's (rewritten, or refused off the sequence axis)
            found = layer_read(node, cache)
            if found is not None:
                layer, part = found
                code = _fill(
                    self.action.param("keys" if part == 0 else "values"), {"cache": cache, "layer": _code(layer)}
                )
                self._guarded_replace(node, code)
                return False
            parent = self.stack[-2] if len(self.stack) > 1 else None
            layer = pair_read(parent, cache) if getattr(parent, "value", None) is node else None
            if layer is not None:  # `k, v = past[i]`
                holes = {"cache": cache, "layer": _code(layer)}
                keys, values = (_fill(self.action.param(part), holes) for part in ("keys", "values"))
                self._guarded_replace(node, f"({keys}, {values})")
                return False
        return True

    def _iteration(self, loop: cst.For | cst.CompFor) -> None:
        """``for k, v in past`` / ``for i, (k, v) in enumerate(past)``: the past read as the pairs of a Cache."""
        if pairs_loop(loop.target, loop.iter, self.cache) is None:
            return
        past = loop.iter if isinstance(loop.iter, cst.Name) else loop.iter.args[0].value
        code = _fill(self.action.param("pairs"), {"cache": self.cache})  # a tuple and a Cache alike
        self.action.changes += 1
        self.replace(past, lambda updated, resolve, code=code: cst.parse_expression(code), reformat=True)

    def _guarded_replace(self, node: cst.BaseExpression, code: str) -> None:
        self.action.changes += 1
        parent = self.stack[-2] if len(self.stack) > 1 else None
        operand = _is_operand(node, parent)
        test = cst.parse_expression(f"isinstance({self.cache}, Cache)")

        def build(updated, resolve, code=code, operand=operand, test=test):
            new = cst.IfExp(test=test, body=cst.parse_expression(code), orelse=updated.with_changes(lpar=[], rpar=[]))
            if updated.lpar or (operand and isinstance(new, LOOSE)):
                return new.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            return new

        self.replace(node, build, reformat=True)

    # -- rebuilds ---------------------------------------------------------------------------------------------

    def _rebuilds(self, block: cst.IndentedBlock) -> None:
        cache = self.cache
        for rebuild in rebuilds(block, cache):
            if block.body[rebuild.index] in self.guarded:
                continue
            if (rebuild.end is not None) != (self.construct == "rollback"):
                continue
            if rebuild.blocker is not None:
                self.ctx.error(
                    self.action.rule,
                    self.current_function,
                    f"`{cache}` is rebuilt layer by layer, but {rebuild.blocker.reason}: a Cache's layers stay "
                    "[batch, heads, seq, head_dim] for the model that reads them next, so only the sequence can be "
                    "edited in place; not rewritten, the file was left unchanged",
                    rebuild.blocker.node,
                )
                continue
            self.action.changes += 1
            lines = self._cache_code(rebuild, cache)
            if rebuild.target is not None and rebuild.target != cache:
                lines.append(f"    {rebuild.target} = {cache}")
            if rebuild.returns:
                code = "\n".join([f"if isinstance({cache}, Cache):", *lines, f"    return {cache}"]) + "\n"
                self.insert(block, rebuild.index, [cst.parse_statement(self.ctx.format_statements(code, self.depth))])
                continue
            head = "\n".join([f"if isinstance({cache}, Cache):", *lines, "else:", "    pass"]) + "\n"
            head = self.ctx.format_statements(head, self.depth)
            original = list(block.body[rebuild.index : rebuild.index + rebuild.count])

            def build(resolve, head=head, original=original):
                statements = resolve.statements(original)
                first = statements[0]
                branch = cst.parse_statement(head)
                kept = [first.with_changes(leading_lines=[]), *statements[1:]]
                orelse = branch.orelse.with_changes(body=branch.orelse.body.with_changes(body=kept))
                return [branch.with_changes(orelse=orelse, leading_lines=first.leading_lines)]

            self.splice(block, rebuild.index, rebuild.count, build, original)

    def _cache_code(self, rebuild, cache: str) -> list[str]:
        if rebuild.end is not None:
            return ["    " + _fill(self.action.param("crop"), {"cache": cache, "end": _code(rebuild.end)})]
        taken = {n.value for n in findall(self.ctx.info.functions[self.current_function].node, m.Name())}
        layer = rebuild.layer or next(
            name for name in ("layer_idx", "layer_index", "cache_layer_idx") if name not in taken
        )
        holes = {"cache": cache, "layer": layer}
        read = f"{rebuild.keys}, {rebuild.values} = {_fill(self.action.param('keys'), holes)}, {_fill(self.action.param('values'), holes)}"
        body = [line for stmt in rebuild.body for line in cst.Module(body=[stmt]).code.strip("\n").splitlines()]
        write = _fill(
            self.action.param("write"),
            {**holes, "new_keys": _code(rebuild.new_keys), "new_values": _code(rebuild.new_values)},
        )
        return [f"    for {layer} in range(len({cache})):", *(f"        {line}" for line in [read, *body, write])]
