"""``replace_statements``: rewrite a run of statements, e.g. the ``torch.cat`` of past keys and values.

The replacement may be empty: the statements are removed, and an ``if`` left with nothing to do goes too (when
its test has no side effects; otherwise it keeps a ``pass``). The replacement may use ``{matched}`` as a block
body: the matched statements, verbatim (comments included), for wrapping them in a new ``if``."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..views.patterns import TemplateError, compile_statements, holes, match_statements
from .base import Action, Planner, captured_nodes
from ..facts.uses import CACHE_GUARD
from .helpers import check_templates, filled_and_formatted, rule_templates, statement_reformatter
from .preserve import preserve
from .scope import PARAM as INSIDE_IF, IfScope, check_inside_if


class ReplaceStatements(Action):
    name = "replace_statements"
    PARAMS = {
        "pattern": (str, False, "statement template(s) to find"),
        "patterns": (list, False, "a list of statement templates; the first that matches wins"),
        "replacement": (str, False, 'statement template using the pattern\'s holes ("" removes the statements)'),
        "replacements": (list, False, "one replacement per pattern of `patterns`, instead of `replacement`"),
        "inside_if": INSIDE_IF,
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        check_templates(rule, check, compile_statements, "statement", {"matched"})
        params = rule.params
        if ("replacement" in params) == ("replacements" in params):
            raise check.fail("params.replacement", "either `replacement` or `replacements` (one per pattern)")
        if "replacements" in params and len(params["replacements"]) != len(params.get("patterns", [])):
            raise check.fail("params.replacements", "one replacement per pattern of `patterns`")
        for key, template in _replacements(params):
            if not isinstance(template, str):
                raise check.fail(key, "a statement template")
            if template.strip():
                try:
                    compile_statements(template)
                except TemplateError as exc:
                    raise check.fail(key, f"a valid statement template ({exc})") from None
        check_inside_if(check, rule)

    def __init__(self, rule, ctx) -> None:
        super().__init__(rule, ctx)
        self.patterns = [compile_statements(t) for t in rule_templates(rule)]
        # the replacement of each pattern (`replacements`: one per pattern; else `replacement` for all)
        self.replacements = [t for _, t in _replacements(rule.params)]
        if len(self.replacements) == 1:
            self.replacements *= len(self.patterns)
        self.replacement = self.replacements[0]
        self.scope = IfScope(rule.params.get("inside_if"))

    def planner(self) -> Planner:
        return _Planner(self)


def _replacements(params) -> list[tuple[str, object]]:
    """(parameter key, template) of each replacement the rule gives."""
    if "replacements" in params:
        return [(f"params.replacements[{i}]", t) for i, t in enumerate(params["replacements"])]
    return [("params.replacement", params.get("replacement", ""))]


class _Planner(Planner):
    def __init__(self, action: ReplaceStatements) -> None:
        super().__init__(action)
        self.wraps = any("matched" in holes(r) for r in action.replacements)
        self.guarded: set[cst.CSTNode] = set()  # else-blocks of `if isinstance(x, <Cache class>)`

    def visit_If(self, node: cst.If) -> None:
        # a replacement that wraps the matched code in `if isinstance(...): ... else: {matched}` must not wrap it
        # again on a second run
        if self.wraps and isinstance(node.orelse, cst.Else) and m.matches(node.test, CACHE_GUARD):
            self.guarded.add(node.orelse.body)

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        if not self.in_function_scope() or node in self.guarded:
            return
        action: ReplaceStatements = self.action
        depth = self.depth  # this block's statements sit at this depth
        bound = self.bound()
        if not action.scope.holds(self.stack, self.view, bound):
            return
        views = self.block_view(node)
        statements = [view.node for view in views]
        index = 0
        while index < len(views):
            for pattern, replacement in zip(action.patterns, action.replacements):
                captures = match_statements(pattern, statements, index, bound)
                if captures is None:
                    continue
                run = views[index : index + len(pattern.matchers)]
                if not self.self_contained(run):
                    continue
                count = sum(view.count for view in run)
                captures = {name: self.originals(value) for name, value in captures.items()}
                self._plan(node, run[0].start, count, captures, bound, depth, replacement)
                index += len(run)
                break
            else:
                index += 1

    def _plan(self, block, index: int, count: int, captures: dict, bound: dict, depth: int, replacement: str) -> None:
        action: ReplaceStatements = self.action
        action.changes += 1
        matched = tuple(block.body[index : index + count])

        def build(resolve):
            if not replacement.strip():
                return []
            values = resolve.values(captures)
            statements = resolve.statements(matched)
            if statements:  # the matched code goes after the replacement's own first line: no leading lines
                statements[0] = statements[0].with_changes(leading_lines=[])
            values["matched"] = tuple(statements)
            new = filled_and_formatted(self.ctx, replacement, {**bound, **values}, depth)
            return preserve(new, resolve.statements(matched), statement_reformatter(self.ctx), depth)

        self.splice(block, index, count, build, captured_nodes(captures))
