"""What every action shares: the context it runs in, scoping to the rule's role, and parameter checks."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping

import libcst as cst
import libcst.matchers as m

from ..analysis import GUARD_TYPES
from ..diagnostics import Diagnostic

if TYPE_CHECKING:
    from ..analysis import ModuleInfo
    from ..rules import Rule, _Checker


@dataclasses.dataclass
class ActionContext:
    """What the engine hands an action: the analysis of the file, the functions and classes the rule applies
    to, the holes bound for each function, and a way to format inserted code."""

    path: str
    info: "ModuleInfo"
    locate: Callable[[cst.CSTNode | None], tuple[int, int]]
    functions: set[str]  # qualified names in scope
    classes: set[str]  # class names in scope
    bound: Callable[[str | None], dict[str, str]]  # qualified function name -> bound holes
    format_statements: Callable[[str, int], str]  # (python code, indent depth) -> formatted code
    line_length: int = 88
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # e.g. signature, deprecation_version
    diagnostics: list[Diagnostic] = dataclasses.field(default_factory=list)

    def reformat(self, stmt: cst.SimpleStatementLine, depth: int) -> cst.SimpleStatementLine:
        """Black-format one edited statement when it no longer fits the line length; otherwise keep it as is."""
        code = cst.Module(body=[stmt.with_changes(leading_lines=[])]).code
        if max(len(line) for line in code.splitlines()) + 4 * depth <= self.line_length:
            return stmt
        formatted = cst.parse_statement(self.format_statements(code, depth))
        return formatted.with_changes(leading_lines=stmt.leading_lines)

    def error(self, rule: "Rule", where: str | None, message: str) -> None:
        """A diagnostic located at the (original) definition of function ``where``."""
        fn = self.info.functions.get(where) if where else None
        line, column = self.locate(fn.node if fn else None)
        self.diagnostics.append(Diagnostic(self.path, line, column, rule.id, message))


class Action:
    """An action is a libcst transformer configured by one rule. Subclasses set ``name`` and ``PARAMS`` and
    count what they changed in ``self.changes``."""

    name: ClassVar[str]
    # parameter -> (python type, required, what is expected: for error messages)
    PARAMS: ClassVar[Mapping[str, tuple[type, bool, str]]] = {}

    @classmethod
    def validate(cls, rule: "Rule", check: "_Checker") -> None:
        check.unknown(set(cls.PARAMS), "params") if rule.params else None
        for key, (kind, required, expected) in cls.PARAMS.items():
            if required or key in rule.params:
                check.get(f"params.{key}", kind, expected)
        cls.check_params(rule, check)

    @classmethod
    def check_params(cls, rule: "Rule", check: "_Checker") -> None:
        """Extra checks, e.g. that templates parse."""

    def __init__(self, rule: "Rule", ctx: ActionContext) -> None:
        self.rule = rule
        self.ctx = ctx
        self.changes = 0

    def param(self, key: str, default: Any = None) -> Any:
        return self.rule.params.get(key, default)

    def transformer(self) -> cst.CSTTransformer:
        raise NotImplementedError


class Scoped(cst.CSTTransformer):
    """A transformer that knows the class and top-level function it is in, to apply only within scope.

    Classes and functions out of the rule's scope are skipped whole (cheap), unless ``VISIT_EVERYTHING`` is set
    by an action that also edits call sites elsewhere in the file."""

    VISIT_EVERYTHING = False

    def __init__(self, action: Action) -> None:
        super().__init__()
        self.action = action
        self.ctx = action.ctx
        self.class_stack: list[str] = []
        self.function_stack: list[str] = []
        self.depth = 0  # indentation depth of the statements being visited
        self.touched: list[bool] = []  # per open SimpleStatementLine: did the action change something in it

    @property
    def current_class(self) -> str | None:
        return self.class_stack[-1] if self.class_stack else None

    @property
    def current_function(self) -> str | None:
        return self.function_stack[0] if self.function_stack else None

    def in_function_scope(self) -> bool:
        return self.current_function in self.ctx.functions

    def bound(self) -> dict[str, str]:
        return self.ctx.bound(self.current_function)

    def on_visit(self, node: cst.CSTNode) -> bool:
        """Track where we are, and skip whole classes and functions the rule does not apply to."""
        skip = not self.VISIT_EVERYTHING
        if isinstance(node, cst.ClassDef) and not self.function_stack:
            self.class_stack.append(node.name.value)
            name = node.name.value
            if skip and name not in self.ctx.classes and not any(q.startswith(name + ".") for q in self.ctx.functions):
                return False
        elif isinstance(node, cst.FunctionDef):
            owner = self.current_class if len(self.class_stack) == 1 and not self.function_stack else None
            self.function_stack.append(f"{owner}.{node.name.value}" if owner else node.name.value)
            if skip and len(self.function_stack) == 1 and self.function_stack[0] not in self.ctx.functions:
                return False
        elif skip and isinstance(node, cst.BaseStatement) and not self.class_stack and not self.function_stack:
            return False  # module-level statements other than classes and functions
        if isinstance(node, cst.IndentedBlock):
            self.depth += 1
        elif isinstance(node, cst.SimpleStatementLine):
            self.touched.append(False)
        return super().on_visit(node)

    def mark_touched(self) -> None:
        """The action changed code inside the current simple statement: it gets reformatted if too long."""
        if self.touched:
            self.touched[-1] = True

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):
        result = super().on_leave(original_node, updated_node)
        if isinstance(original_node, cst.IndentedBlock):
            self.depth -= 1
        elif isinstance(original_node, cst.SimpleStatementLine) and self.touched:
            if self.touched.pop() and isinstance(result, cst.SimpleStatementLine):
                result = self.ctx.reformat(result, self.depth)
        if isinstance(original_node, cst.FunctionDef):
            self.function_stack.pop()
        elif isinstance(original_node, cst.ClassDef) and not self.function_stack:
            self.class_stack.pop()
        return result


# `isinstance(x, Cache)` and the like: code guarded by it already handles a Cache
CACHE_GUARD = m.Call(
    func=m.Name("isinstance"), args=[m.Arg(), m.Arg(m.Name(m.MatchIfTrue(lambda name: name in GUARD_TYPES)))]
)


def depth_of(function_qualname: str | None) -> int:
    """Indentation depth of a top-level statement in a function body (method: 2, function: 1)."""
    if function_qualname is None:
        return 0
    return 2 if "." in function_qualname else 1


def check_holes(check: "_Checker", key: str, template: str, captured: set[str]) -> None:
    """A template may only use holes its pattern captures or that are bound (``cache``, ``layers``, facts)."""
    from ..patterns import holes

    unknown = holes(template) - captured - set(getattr(check, "bound_names", ()))
    if unknown:
        raise check.fail(
            key, f"a template whose holes are captured or bound ({', '.join(sorted(unknown))} is not)", template
        )


def _without_comment(comma: cst.Comma) -> cst.Comma:
    """``comma`` without the comment (and blank lines) that may follow it on its line."""
    after = comma.whitespace_after
    if isinstance(after, cst.ParenthesizedWhitespace):
        return comma.with_changes(
            whitespace_after=after.with_changes(first_line=cst.TrailingWhitespace(), empty_lines=[])
        )
    return comma


def _with_comment_of(comma: cst.Comma, source: cst.Comma) -> cst.Comma:
    """``comma`` carrying the end-of-line comment of ``source``, when both end a line."""
    if isinstance(comma.whitespace_after, cst.ParenthesizedWhitespace) and isinstance(
        source.whitespace_after, cst.ParenthesizedWhitespace
    ):
        return comma.with_changes(
            whitespace_before=source.whitespace_before,
            whitespace_after=comma.whitespace_after.with_changes(first_line=source.whitespace_after.first_line),
        )
    return comma


def append_item(items: list, new: cst.CSTNode, trailing_field: str) -> list:
    """Append ``new`` to a comma-separated list of Params or Args, following the list's layout: one item per
    line (a trailing comma) or all on one line. ``trailing_field`` is the whitespace after an item
    (``whitespace_after_param`` or ``whitespace_after_arg``)."""
    if not items:
        return [new]
    last = items[-1]
    before_last = items[-2].comma if len(items) > 1 else None
    separator = (
        _without_comment(before_last)
        if isinstance(before_last, cst.Comma)
        else cst.Comma(cst.SimpleWhitespace(""), cst.SimpleWhitespace(" "))
    )
    if isinstance(last.comma, cst.Comma):
        # ``new`` takes the trailing comma (and the line break before the closing bracket); a comment after the
        # last item stays on that item's line
        new = new.with_changes(comma=_without_comment(last.comma))
        last = last.with_changes(comma=_with_comment_of(separator, last.comma))
    else:
        # no trailing comma: the separator the list already uses (", " or one item per line) goes before ``new``
        new = new.with_changes(**{trailing_field: getattr(last, trailing_field)})
        last = last.with_changes(comma=separator, **{trailing_field: cst.SimpleWhitespace("")})
    return [*items[:-1], last, new]


def filled_and_formatted(ctx: ActionContext, template: str, values: Mapping, depth: int) -> list[cst.BaseStatement]:
    """The template's statements with holes filled, black-formatted as inserted code at ``depth``.

    A template that splices a captured block (``{body}``) is not formatted: that block is the user's code,
    whose layout is kept; such templates are written black-style."""
    import textwrap

    from ..patterns import fill_statements, holes, to_python

    python = to_python(textwrap.dedent(template).strip() + "\n")
    filled = fill_statements(python, values)
    if any(isinstance(values.get(name), tuple) for name in holes(template)):
        return filled
    code = ctx.format_statements(cst.Module(body=filled).code, depth)
    return list(cst.parse_module(code).body)


def rule_templates(rule: "Rule") -> list:
    """The rule's ``patterns`` list and single ``pattern``, together."""
    return list(rule.params.get("patterns", [])) + ([rule.params["pattern"]] if "pattern" in rule.params else [])


def calls_role_module(ctx: ActionContext, current_class: str | None, func: cst.BaseExpression, targets: set) -> bool:
    """``func`` calls a module of one of the ``targets`` classes: ``self.<attr>`` built from such a class in
    ``__init__``, or a local variable (the block of the layer loop) in a class holding a ModuleList of them. A
    module-level name (an output class, a function) never is."""
    owner = ctx.info.classes.get(current_class) if current_class else None
    if owner is None:
        return False
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
        return owner.submodules.get(func.attr.value) in targets
    if isinstance(func, cst.Name) and func.value not in ctx.info.globals:
        return bool(set(owner.module_lists.values()) & targets)
    return False


def check_templates(rule: "Rule", check: "_Checker", compile_template: Callable, kind: str, extra: set = frozenset()):
    """Load-time checks shared by the pattern actions: ``pattern``/``patterns`` present, each a valid ``kind``
    template, and the replacement using only holes each pattern captures (or ``extra`` ones)."""
    from ..patterns import TemplateError

    if "patterns" in rule.params:
        check.str_list("params.patterns")
    templates = rule_templates(rule)
    if not templates:
        raise check.fail("params.pattern", f"a {kind} template (or `patterns`, a list of them)")
    for template in templates:
        try:
            pattern = compile_template(template)
        except TemplateError as exc:
            key = "params.pattern" if template == rule.params.get("pattern") else "params.patterns"
            raise check.fail(key, f"a valid {kind} template ({exc})", template) from None
        check_holes(check, "params.replacement", rule.params["replacement"], pattern.holes() | set(extra))
