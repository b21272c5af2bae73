"""Small helpers the actions share: template checks and filling, comma-separated lists, role calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping

import libcst as cst
import libcst.matchers as m

from ..traverse import findall

if TYPE_CHECKING:
    from ..rules.schema import Checker, Rule
    from .base import ActionContext


# `{name|test}` in a pattern: the capture must pass the engine's test (bound as "?test")
PREDICATES = frozenset({"converter", "no_cache_check", "layer_index", "sequence_axis"})


def ancestry(info, name: str) -> tuple[set[str], set[str]]:
    """(the classes of the file among ``name`` and its ancestors, the names of their bases outside the file, as
    written: ``nn.Module``, ``PreTrainedModel``)."""
    inside: set[str] = set()
    outside: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in inside:
            continue
        if current not in info.classes:
            outside.add(current)
            continue
        inside.add(current)
        todo.extend(info.classes[current].bases)
    return inside, outside


def class_qualifies(info, name: str, methods=(), attributes=(), bases=()) -> bool:
    """``name`` (a class of the file) or a base of it in the file defines one of ``methods``, builds one of
    ``attributes`` in ``__init__`` (``self.lm_head = ...``) or lists one of ``bases``; every class qualifies when
    all three are empty. Heads that could generate are found this way (``prepare_inputs_for_generation``,
    ``lm_head``, ``GenerationMixin``)."""
    if not methods and not attributes and not bases:
        return True
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in seen or current not in info.classes:
            continue
        seen.add(current)
        found = info.classes[current]
        own = {base.rsplit(".", 1)[-1] for base in found.bases}
        if (
            any(m in found.methods for m in methods)
            or any(a in found.submodules for a in attributes)
            or own & set(bases)
        ):
            return True
        todo.extend(found.bases)
    return False


def depth_of(function_qualname: str | None) -> int:
    """Indentation depth of a top-level statement in a function body (method: 2, function: 1)."""
    if function_qualname is None:
        return 0
    return 2 if "." in function_qualname else 1


def check_holes(check: "Checker", key: str, template: str, captured: set[str]) -> None:
    """A template may only use holes its pattern captures or that are bound (``cache``, ``layers``, facts), and
    only the engine's filters (``{key|key_to_cache}``)."""
    from ..facts.conversions import FILTERS
    from ..views.patterns import filters_in, holes

    unknown = holes(template) - captured - set(getattr(check, "bound_names", ()))
    if unknown:
        raise check.fail(
            key, f"a template whose holes are captured or bound ({', '.join(sorted(unknown))} is not)", template
        )
    strange = filters_in(template) - FILTERS
    if strange:
        known = ", ".join(sorted(FILTERS))
        raise check.fail(key, f"filters the engine provides ({known}; {', '.join(sorted(strange))} is not)", template)


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

    from ..views.patterns import fill_statements, holes, to_python

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
    ``__init__`` (or ``self.<attr>[i]``, one of a block's parts), or a local variable (the block of the layer loop)
    in a class holding a ModuleList of them. A
    module-level name (an output class, a function) never is."""
    owner = ctx.info.classes.get(current_class) if current_class else None
    if owner is None:
        return False
    if isinstance(func, cst.Subscript):  # `self.layer[0](...)`: a part of a block kept in a ModuleList
        func = func.value
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
        return bool(set(owner.choices.get(func.attr.value, ())) & set(targets))
    if isinstance(func, cst.Name) and func.value not in ctx.info.globals:
        return bool(set(owner.module_lists.values()) & targets)
    return False


def check_templates(rule: "Rule", check: "Checker", compile_template: Callable, kind: str, extra: set = frozenset()):
    """Load-time checks shared by the pattern actions: ``pattern``/``patterns`` present, each a valid ``kind``
    template, and the replacement (when the action has one) using only holes each pattern captures (or ``extra``
    ones)."""
    from ..views.patterns import TemplateError

    if "patterns" in rule.params:
        check.str_list("params.patterns")
    templates = rule_templates(rule)
    if not templates:
        raise check.fail("params.pattern", f"a {kind} template (or `patterns`, a list of them)")
    from ..views.patterns import filters_in

    for number, template in enumerate(templates):
        strange = filters_in(template) - PREDICATES
        if strange:
            key = "params.pattern" if template == rule.params.get("pattern") else "params.patterns"
            raise check.fail(
                key, f"a pattern whose tests are the engine's ({', '.join(sorted(PREDICATES))})", template
            )
        try:
            pattern = compile_template(template)
        except TemplateError as exc:
            key = "params.pattern" if template == rule.params.get("pattern") else "params.patterns"
            raise check.fail(key, f"a valid {kind} template ({exc})", template) from None
        if "replacement" in rule.params:
            check_holes(check, "params.replacement", rule.params["replacement"], pattern.holes() | set(extra))
        replacements = rule.params.get("replacements")
        if isinstance(replacements, list) and number < len(replacements) and isinstance(replacements[number], str):
            check_holes(check, f"params.replacements[{number}]", replacements[number], pattern.holes() | set(extra))


def statement_reformatter(ctx: "ActionContext"):
    """Black for a statement the rule wrote that does not fit the line length: a simple statement whole, a
    compound one only in its header (its block is the user's code)."""

    def fits(code: str, depth: int) -> bool:
        return max((len(line) for line in code.splitlines()), default=0) + 4 * depth <= ctx.line_length

    def reformat(stmt: cst.BaseStatement, depth: int) -> cst.BaseStatement:
        if isinstance(stmt, cst.SimpleStatementLine):
            code = cst.Module(body=[stmt.with_changes(leading_lines=[])]).code
            if fits(code, depth):
                return stmt
            formatted = cst.parse_statement(ctx.format_statements(code, depth))
            return formatted.with_changes(leading_lines=stmt.leading_lines)
        if isinstance(stmt, (cst.If, cst.While)):
            stub = stmt.with_changes(
                body=cst.IndentedBlock([cst.SimpleStatementLine([cst.Pass()])]), leading_lines=[], orelse=None
            )
            code = cst.Module(body=[stub]).code
            header = code[: code.rindex("pass")]
            if fits(header, depth):
                return stmt
            formatted = cst.parse_statement(ctx.format_statements(code, depth))
            return stmt.with_changes(test=formatted.test, whitespace_before_test=formatted.whitespace_before_test)
        return stmt

    return reformat


def passes_beside_var_kwargs(function: cst.FunctionDef, names) -> bool:
    """Whether ``function`` has a call handing one of ``names`` as a keyword argument beside ``**<its own
    **kwargs>`` (``super().prepare_inputs_for_generation(..., position_ids=ids, **model_kwargs)``): a call that
    raises TypeError when the caller's keyword arguments hold that name too."""
    star = function.params.star_kwarg
    if not isinstance(star, cst.Param):
        return False
    keyword = m.Arg(keyword=m.Name(m.MatchIfTrue(lambda value: value in names)))
    spread = m.Arg(value=m.Name(star.name.value), star="**")
    return bool(findall(function.body, m.Call(args=[m.ZeroOrMore(), keyword, m.ZeroOrMore()]) & m.Call(
        args=[m.ZeroOrMore(), spread, m.ZeroOrMore()]
    )))
