"""``replace_class_statements``: rewrite statements of a class body (not of its methods), in the classes of the
rule's role that derive from one of ``bases`` (by the name written in the ``class`` line), e.g. the
``past_key_values`` field of an output dataclass defined in the model file.

The replacement is a statement template with the pattern's holes and ``{matched}`` (the matched statements)."""

from __future__ import annotations

import libcst as cst

from ..views.patterns import TemplateError, code_of, compile_statements, match_statements
from .base import Action, Planner, captured_nodes
from .helpers import check_templates, filled_and_formatted, rule_templates


class ReplaceClassStatements(Action):
    name = "replace_class_statements"
    PARAMS = {
        "bases": (list, True, 'base class names, e.g. ["ModelOutput"]: only classes deriving from one'),
        "pattern": (str, False, "statement template(s) to find in the class body"),
        "patterns": (list, False, "a list of statement templates; the first that matches wins"),
        "replacement": (str, True, "statement template using the pattern's holes"),
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        check.str_list("params.bases")
        check_templates(rule, check, compile_statements, "statement", {"matched"})
        try:
            compile_statements(rule.params["replacement"])
        except TemplateError as exc:
            raise check.fail("params.replacement", f"a valid statement template ({exc})") from None

    def __init__(self, rule, ctx) -> None:
        super().__init__(rule, ctx)
        self.patterns = [compile_statements(t) for t in rule_templates(rule)]

    def planner(self) -> Planner:
        return _Planner(self)


class _Planner(Planner):
    CLASS_LEVEL = True  # class bodies are edited: visited without a function in scope

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if self.function_stack or len(self.class_stack) != 1 or node.name.value not in self.ctx.classes:
            return
        action: ReplaceClassStatements = self.action
        wanted = set(action.param("bases"))
        if not any(code_of(b.value).split(".")[-1] in wanted for b in node.bases if b.keyword is None):
            return
        statements = list(node.body.body)
        index = 0
        while index < len(statements):
            for pattern in action.patterns:
                captures = match_statements(pattern, statements, index, {})
                if captures is None:
                    continue
                count = len(pattern.matchers)
                self._plan(node.body, index, count, captures)
                index += count
                break
            else:
                index += 1

    def _plan(self, block, index: int, count: int, captures: dict) -> None:
        action: ReplaceClassStatements = self.action
        action.changes += 1
        matched = tuple(block.body[index : index + count])
        leading = matched[0].leading_lines

        def build(resolve):
            values = resolve.values(captures)
            statements = resolve.statements(matched)
            statements[0] = statements[0].with_changes(leading_lines=[])
            values["matched"] = tuple(statements)
            new = filled_and_formatted(self.ctx, action.param("replacement"), values, 1)
            return [new[0].with_changes(leading_lines=leading), *new[1:]]

        self.splice(block, index, count, build, captured_nodes(captures))
