"""``replace_expression``: rewrite an expression idiom, e.g. ``{cache}[0][0].size(-2)`` -> ``{cache}.get_seq_length()``."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..views.patterns import (
    TemplateError,
    compile_expression,
    compile_statements,
    fill_expression,
    holes,
    match_expression,
    to_python,
    match_statements,
)
from ..views.negation import negated
from .base import Action, Planner, captured_nodes
from .where import is_a
from ..facts.uses import CACHE_GUARD
from .helpers import check_templates, rule_templates
from .scope import PARAM as INSIDE_IF, IfScope, check_inside_if
from ..traverse import findall, matcher_kinds

# expressions that bind more loosely than an operand: where the match was an operand, the replacement gets
# parentheses, or the rendered code would group differently than the planned tree
LOOSE = (
    cst.IfExp,
    cst.Lambda,
    cst.NamedExpr,
    cst.BooleanOperation,
    cst.UnaryOperation,
    cst.Comparison,
    cst.BinaryOperation,
)


def _is_operand(node: cst.CSTNode, parent: cst.CSTNode | None) -> bool:
    """``node`` is an operand of an operator (or the object of an attribute, subscript, call or await)."""
    if isinstance(parent, (cst.BinaryOperation, cst.UnaryOperation, cst.BooleanOperation, cst.IfExp)):
        return True
    if isinstance(parent, (cst.Comparison, cst.ComparisonTarget, cst.Await)):
        return True
    if isinstance(parent, (cst.Attribute, cst.Subscript)):
        return parent.value is node
    return isinstance(parent, cst.Call) and parent.func is node


def _groups_alike(new: cst.BaseExpression, parent: cst.CSTNode) -> bool:
    """``a and b`` as an operand of ``... and c`` (or of an ``or``, which binds more loosely) reads the same
    without parentheses."""
    if not isinstance(new, cst.BooleanOperation) or not isinstance(parent, cst.BooleanOperation):
        return False
    return type(new.operator) is type(parent.operator) or isinstance(parent.operator, cst.Or)


def _captured_name(template: str) -> str | None:
    """The plain name a ``capture`` template's one assignment binds."""
    try:
        (statement,) = cst.parse_module(to_python(template.strip() + "\n")).body
    except (cst.ParserSyntaxError, ValueError):
        return None
    inner = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
    if isinstance(inner, cst.Assign) and len(inner.targets) == 1 and isinstance(inner.targets[0].target, cst.Name):
        return inner.targets[0].target.value
    return None


def _handed_on(node: cst.CSTNode, stack: list) -> bool:
    """``node`` is a call's argument or the value of an assignment, as it is."""
    parent = stack[-2] if len(stack) > 1 else None
    if isinstance(parent, cst.Arg):
        return parent.value is node
    return isinstance(parent, (cst.Assign, cst.AnnAssign)) and parent.value is node


class ReplaceExpression(Action):
    name = "replace_expression"
    PARAMS = {
        "pattern": (str, False, 'an expression template, e.g. "{cache}[0][0].size(-2)"'),
        "patterns": (list, False, "a list of expression templates"),
        "replacement": (str, True, "an expression template using the pattern's holes"),
        "only_before": (
            str,
            False,
            "statement template(s): rewrite only what comes before the first place they match in the function "
            "(e.g. a past length read before the cache is updated)",
        ),
        "only_after": (
            str,
            False,
            "statement template(s): rewrite only what comes after the first place they match in the function (a "
            "past length read after the cache is updated), with `capture`",
        ),
        "capture": (
            str,
            False,
            "with `only_after`: one assignment, inserted before the function's statement that holds that first "
            "match, to a name the function does not use (the replacement reads it): what is read after the update, "
            "taken before it",
        ),
        "inside_if": INSIDE_IF,
        "test_of_if_doing": (
            str,
            False,
            "an expression template: rewrite a match only in the test of an `if` (or `elif`) whose body holds code "
            "matching it (a presence test in a `forward` whose branch cuts the inputs to their last position: "
            "`{x}[:, -1:]`)",
        ),
        "only_handed_on": (
            bool,
            False,
            "rewrite a match only where it is handed on as it is: a call's argument, or the value of an assignment "
            "(not an operand: `past[i] if past else ()` keeps its tuple fallback, and its use is reported)",
        ),
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        check_templates(rule, check, compile_expression, "expression", {"matched"})
        for key in ("only_before", "only_after", "capture"):
            if key in rule.params:
                try:
                    compile_statements(rule.params[key])
                except TemplateError as exc:
                    raise check.fail(f"params.{key}", f"a valid statement template ({exc})") from None
        after, capture, before = (key in rule.params for key in ("only_after", "capture", "only_before"))
        if after != capture or (after and before):
            raise check.fail("params.only_after", "`only_after` together with `capture`, and not with `only_before`")
        if "capture" in rule.params and _captured_name(rule.params["capture"]) is None:
            raise check.fail("params.capture", "one assignment to a plain name (`length = ...`)")
        check_inside_if(check, rule)
        if "test_of_if_doing" in rule.params:
            try:
                compile_expression(rule.params["test_of_if_doing"])
            except TemplateError as exc:
                raise check.fail("params.test_of_if_doing", f"a valid expression template ({exc})") from None

    def __init__(self, rule, ctx) -> None:
        super().__init__(rule, ctx)
        self.patterns = [compile_expression(t) for t in rule_templates(rule)]
        self.types = {type(p.matchers[0]).__name__ for p in self.patterns}
        barrier = rule.params.get("only_before", rule.params.get("only_after"))
        self.barrier = compile_statements(barrier) if barrier is not None else None
        self.after = "only_after" in rule.params  # rewrite after the barrier (taking the value before it), not before
        self.capture = rule.params.get("capture")
        self.scope = IfScope(rule.params.get("inside_if"))
        doing = rule.params.get("test_of_if_doing")
        self.doing = compile_expression(doing) if doing else None
        # a replacement that keeps the matched code (`{matched} and ...`) holds the pattern again: an expression
        # that already reads as the replacement around a match is the rule's own output, not rewritten again
        replacement = rule.params["replacement"]
        self.output = compile_expression(replacement) if "matched" in holes(replacement) else None
        # the view types a match or the rule's own output can have (None: any); at another, nothing is done
        output = matcher_kinds(self.output.matchers[0]) if self.output is not None else frozenset()
        self.relevant = None if output is None else frozenset(self.types) | output

    def is_output(self, view, bound) -> bool:
        if self.output is None:
            return False
        captures = match_expression(self.output, view, bound)
        if captures is None or "matched" not in captures:
            return False
        return any(match_expression(p, captures["matched"], bound) is not None for p in self.patterns)

    def planner(self) -> Planner:
        return _Planner(self)


class _Planner(Planner):
    """Plans the rewrite of matching expressions (the outermost match wins), except in the tuple branch of
    ``a if isinstance(x, Cache) else b``: that code is already guarded (a second run must not wrap its own
    output again)."""

    ENTERS_TRIVIA = False  # enter() looks at expressions, statements and blocks only

    def __init__(self, action: ReplaceExpression) -> None:
        super().__init__(action)
        self.guarded: set[cst.CSTNode] = set()  # original nodes, alive for the whole plan
        self.barriers: set[cst.CSTNode] = set()  # first statements of the `only_before` matches
        self.past_barrier = False
        self.hoist_at: tuple | None = None  # where the capture goes: see _top_statement
        self.captured = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if len(self.function_stack) == 1:
            self.past_barrier, self.hoist_at, self.captured = False, None, False
            self.barriers = self._barriers(node) if self.action.barrier is not None else set()

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        if len(self.function_stack) == 1:
            self.past_barrier = False

    def _barriers(self, function: cst.FunctionDef) -> set[cst.CSTNode]:
        """The original statements where a match of ``only_before`` starts, in every block of the function."""
        found = set()
        bound = self.bound()
        for block in findall(function, m.IndentedBlock()):
            views = self.block_view(block)
            statements = [v.node for v in views]
            for index, view in enumerate(views):
                if match_statements(self.action.barrier, statements, index, bound) is not None:
                    found.add(block.body[view.start])
        return found

    def enters(self, kind: type) -> bool:
        """Expressions (a match, a guarded branch, a guard), an ``assert``'s test, and where this rule has a
        barrier, the statements that can start it (and with ``only_after``, the assignments that can rebind the
        cache); at any other node :meth:`enter` does nothing (past the barrier it would skip the node, and it skips
        each expression below it instead)."""
        if issubclass(kind, (cst.BaseExpression, cst.Assert)):
            return True
        if self.action.barrier is not None and issubclass(kind, cst.BaseStatement):
            return True
        return self.action.after and issubclass(kind, (cst.Assign, cst.AugAssign, cst.AnnAssign))

    def enter(self, node) -> bool:
        if self.guarded and node in self.guarded:
            return False
        if self.barriers and node in self.barriers and not self.past_barrier:
            self.past_barrier = True
            self.hoist_at = self._top_statement()
        if self.past_barrier and self.function_stack and not self.action.after:
            return False  # the code after the barrier reads the updated cache: not rewritten
        if self.action.after and not self.past_barrier:
            return True  # before the barrier: another rule's (the cache is not updated yet)
        if self.action.after and self.function_stack and self._rebinds_cache(node):
            self.barriers, self.past_barrier = set(), False  # the name holds another past from here on
            return False
        if is_a(node, cst.IfExp) and m.matches(node.test, CACHE_GUARD):
            self.guarded.add(node.orelse)
        if is_a(node, cst.Assert) and self.in_function_scope() and self._assertion(node):
            return False
        if not is_a(node, cst.BaseExpression) or not self.in_function_scope():
            return True
        action: ReplaceExpression = self.action
        view = self.view(node)
        if action.relevant is not None and type(view).__name__ not in action.relevant:
            return True  # neither a match nor the rule's output (each matches its own node type only)
        bound = self.bound()
        if action.is_output(view, bound):
            return False
        if type(view).__name__ not in action.types:
            return True
        if not action.scope.holds(self.stack, self.view, bound):
            return True
        if action.rule.params.get("only_handed_on") and not _handed_on(node, self.stack):
            return True
        if action.doing is not None and not self._in_test_of_if_doing(bound):
            return True
        for pattern in action.patterns:
            captures = match_expression(pattern, view, bound)
            if captures is None:
                continue
            if action.after and not self._take_before_barrier(bound):
                return True
            action.changes += 1
            replacement = action.rule.params["replacement"]

            captures = {name: self.originals(value) for name, value in captures.items()}

            parent = self.stack[-2] if len(self.stack) > 1 else None
            operand = parent if _is_operand(node, parent) else None

            def build(updated, resolve, captures=captures, bound=bound, operand=operand):
                # {matched}: the matched expression itself, as the user wrote it (with the edits inside it)
                values = {**bound, **resolve.values(captures), "matched": updated.with_changes(lpar=[], rpar=[])}
                new = fill_expression(replacement, values)
                if updated.lpar:
                    return new.with_changes(lpar=updated.lpar, rpar=updated.rpar)
                if operand and isinstance(new, LOOSE) and not _groups_alike(new, operand):
                    # `1 + x * 2` with `x` -> `a if c else x` must read `1 + (a if c else x) * 2`
                    return new.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                return new

            self.replace(node, build, captured_nodes(captures), reformat=True)
            return False
        return True

    def _rebinds_cache(self, node: cst.CSTNode) -> bool:
        """An assignment to the cache's name (``past = (k, v)``): what it reads after is not the past it was given."""
        cache = self.bound().get("cache")
        if cache is None or not isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
            return False
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        return any(findall(t, m.Name(cache)) for t in targets)

    def _top_statement(self) -> tuple | None:
        """(the function being visited, its body, the index there of the statement that holds the current node, the
        indentation depth of that body)."""
        first = next((i for i, n in enumerate(self.stack) if isinstance(n, cst.FunctionDef)), None)
        if first is None or len(self.stack) < first + 3:
            return None
        function, body, statement = self.stack[first : first + 3]
        index = next((i for i, s in enumerate(getattr(body, "body", ())) if s is statement), None)
        depth = sum(1 for n in self.stack[: first + 2] if isinstance(n, cst.IndentedBlock))
        return None if index is None else (function, body, index, depth)

    def _take_before_barrier(self, bound) -> bool:
        """With ``only_after``: the ``capture`` assignment is planned once per function, before the statement that
        holds the barrier; False (the match is left alone) where it cannot be: no such statement, or a function that
        already uses the name it binds."""
        if self.captured:
            return True
        if self.hoist_at is None:
            return False
        function, block, index, depth = self.hoist_at
        if findall(function, m.Name(_captured_name(self.action.capture))):
            return False
        from .helpers import filled_and_formatted

        self.insert(block, index, filled_and_formatted(self.ctx, self.action.capture, bound, depth))
        self.captured = True
        return True

    def _in_test_of_if_doing(self, bound) -> bool:
        """The current node is in the test of an ``if`` whose body holds a match of ``test_of_if_doing``."""
        action: ReplaceExpression = self.action
        for index, node in enumerate(self.stack[:-1]):
            if isinstance(node, cst.If) and self.stack[index + 1] is node.test:
                return any(
                    match_expression(action.doing, self.view(inner), bound) is not None
                    for inner in findall(node.body, getattr(m, type(action.doing.matchers[0]).__name__)())
                )
        return False

    def _assertion(self, node: cst.Assert) -> bool:
        """``assert <test>, <message>``, the older spelling of ``if not <test>: raise ...``: a pattern written for
        the raising condition matches the negation of the test (:mod:`cachemigrate.views.negation`), and the test
        becomes the negation of what the rule writes there (``assert len(past) == 2`` -> ``assert
        isinstance(past, Cache) or len(past) == 2``). True when it planned that rewrite."""
        action: ReplaceExpression = self.action
        if not isinstance(node.test, cst.BaseExpression) or node.test in self.guarded:
            return False
        bound = self.bound()
        raising = negated(self.view(node.test))
        if action.is_output(raising, bound) or not action.scope.holds(self.stack, self.view, bound):
            return False
        for pattern in action.patterns:
            captures = match_expression(pattern, raising, bound)
            if captures is None or "matched" in captures:
                continue
            action.changes += 1
            captures = {name: self.originals(value) for name, value in captures.items()}
            replacement = action.rule.params["replacement"]

            def build(updated, resolve, captures=captures, bound=bound, replacement=replacement):
                # {matched}: the raising condition, `not (<the test as the user wrote it>)`, negated back below
                kept = updated.with_changes(lpar=[], rpar=[])
                matched = cst.UnaryOperation(
                    cst.Not(), kept.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                )
                new = negated(fill_expression(replacement, {**bound, **resolve.values(captures), "matched": matched}))
                return new.with_changes(lpar=updated.lpar, rpar=updated.rpar)

            self.replace(node.test, build, captured_nodes(captures), reformat=True)
            return True
        return False
