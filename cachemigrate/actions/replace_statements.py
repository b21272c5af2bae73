"""``replace_statements``: rewrite a run of statements, e.g. the ``torch.cat`` of past keys and values.

The replacement may be empty: the statements are removed, and an ``if`` left with nothing to do goes too.
The replacement may use ``{matched}`` as a block body: the matched statements, verbatim (comments included),
for wrapping them in a new ``if``."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..patterns import TemplateError, compile_statements, holes, match_statements
from .base import CACHE_GUARD, Action, Scoped, check_templates, filled_and_formatted, rule_templates


class ReplaceStatements(Action):
    name = "replace_statements"
    PARAMS = {
        "pattern": (str, False, "statement template(s) to find"),
        "patterns": (list, False, "a list of statement templates; the first that matches wins"),
        "replacement": (str, True, 'statement template using the pattern\'s holes ("" removes the statements)'),
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        check_templates(rule, check, compile_statements, "statement", {"matched"})
        if rule.params["replacement"].strip():
            try:
                compile_statements(rule.params["replacement"])
            except TemplateError as exc:
                raise check.fail("params.replacement", f"a valid statement template ({exc})") from None

    def __init__(self, rule, ctx) -> None:
        super().__init__(rule, ctx)
        self.patterns = [compile_statements(t) for t in rule_templates(rule)]
        self.replacement = rule.params["replacement"]

    def transformer(self) -> cst.CSTTransformer:
        return _Transformer(self)

    def build(self, captures: dict, depth: int) -> list[cst.BaseStatement]:
        if not self.replacement.strip():
            return []
        return filled_and_formatted(self.ctx, self.replacement, captures, depth)


_EMPTIED = object()


class _Transformer(Scoped):
    def __init__(self, action: ReplaceStatements) -> None:
        super().__init__(action)
        self.emptied: set[int] = set()
        self.wraps = "matched" in holes(action.replacement)
        self.guarded: set[int] = set()  # else-blocks of `if isinstance(x, <Cache class>)`

    def visit_If(self, node: cst.If) -> None:
        # a replacement that wraps the matched code in `if isinstance(...): ... else: {matched}` must not wrap it
        # again on a second run
        if self.wraps and isinstance(node.orelse, cst.Else) and m.matches(node.test, CACHE_GUARD):
            self.guarded.add(id(node.orelse.body))

    def leave_IndentedBlock(self, original_node, updated_node):
        depth = self.depth  # Scoped counts blocks; this block's statements sit at this depth
        if not self.in_function_scope() or id(original_node) in self.guarded:
            return updated_node
        action: ReplaceStatements = self.action
        bound = self.bound()
        body = list(updated_node.body)
        out: list[cst.BaseStatement] = []
        index = 0
        changed = False
        while index < len(body):
            for pattern in action.patterns:
                captures = match_statements(pattern, body, index, bound)
                if captures is not None:
                    # {matched}: the matched statements themselves, verbatim, to wrap them
                    matched = list(body[index : index + len(pattern.matchers)])
                    matched[0] = matched[0].with_changes(leading_lines=[])  # they go before the replacement
                    captures["matched"] = tuple(matched)
                    replacement = action.build({**bound, **captures}, depth)
                    if replacement and body[index].leading_lines:
                        replacement[0] = replacement[0].with_changes(leading_lines=body[index].leading_lines)
                    out.extend(replacement)
                    index += len(pattern.matchers)
                    action.changes += 1
                    changed = True
                    break
            else:
                out.append(body[index])
                index += 1
        if not out:
            block = updated_node.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])])
            self.emptied.add(id(block))
            return block
        return updated_node.with_changes(body=out) if changed else updated_node

    def leave_If(self, original_node: cst.If, updated_node: cst.If):
        if id(updated_node.body) in self.emptied:
            if updated_node.orelse is None:
                return cst.RemoveFromParent()
        if isinstance(updated_node.orelse, cst.Else) and id(updated_node.orelse.body) in self.emptied:
            return updated_node.with_changes(orelse=None)
        return updated_node
