"""The template engine (cachemigrate.views.patterns): templates with {holes} compiled to libcst matchers, matched
layout-insensitively, and filled back in."""

import libcst as cst
import pytest

from cachemigrate.views.normalize import normalize_template, normalize_template_expression
from cachemigrate.views.patterns import (
    TemplateError,
    code_of,
    compile_expression,
    compile_statements,
    fill_expression,
    fill_statements,
    holes,
    match_expression,
    match_statements,
    to_python,
)

CACHES = {"past", "past_key_values", "layer_past"}  # the names the code below uses as caches


def match_expr(template: str, code: str, bound=None):
    """Captures as code strings, or None when the template does not match the normalised view of ``code``
    (the engine matches views, never raw code: see cachemigrate.views.normalize)."""
    view = normalize_template_expression(cst.parse_expression(code), CACHES)
    found = match_expression(compile_expression(template), view, bound or {})
    return None if found is None else {name: _code(node) for name, node in found.items()}


def match_stmts(template: str, code: str, start: int = 0, bound=None):
    body = normalize_template(list(cst.parse_module(code).body), CACHES)
    found = match_statements(compile_statements(template), body, start, bound or {})
    return None if found is None else {name: _code(node) for name, node in found.items()}


def _code(node):
    if isinstance(node, tuple):  # a captured block body
        return [code_of(stmt) for stmt in node]
    return code_of(node)


def render(statements) -> str:
    return cst.Module(body=list(statements)).code


CAT = "torch.cat(({past}, {new}), dim=-2)"


# ------------------------------------------------------------------------------------------------------------------
# Matching expressions
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "torch.cat((past_k, k), dim=-2)",
        "torch.cat( ( past_k,k ),dim = -2 )",
        "torch.cat(\n    (past_k, k),  # keys\n    dim=-2,\n)",
        "(torch.cat((past_k, k), dim=-2))",
    ],
)
def test_matching_ignores_layout(code):
    assert match_expr(CAT, code) == {"past": "past_k", "new": "k"}


@pytest.mark.parametrize(
    "code",
    [
        "torch.cat((past_k, k), dim=2)",  # another literal
        "torch.cat((past_k, k), dim=-1)",
        "torch.cat((past_k, k, extra), dim=-2)",  # one element more
        "torch.cat((past_k, k))",  # keyword missing
        "torch.stack((past_k, k), dim=-2)",  # another function
        "numpy.cat((past_k, k), dim=-2)",
    ],
)
def test_literals_names_and_arity_must_agree(code):
    assert match_expr(CAT, code) is None


def test_a_hole_captures_any_expression():
    assert match_expr("{cache}[0][0].size(-2)", "self.past[layer - 1][0].size(-2)") is None  # [0] is a literal
    assert match_expr("{cache}[0][0].size(-2)", "outputs[1][0][0].size(-2)") == {"cache": "outputs[1]"}
    assert match_expr("{a}.update({k}, {v})", "cache.update(k.float(), v * 2)") == {
        "a": "cache",
        "k": "k.float()",
        "v": "v * 2",
    }


def test_tuple_and_list_are_the_same_idiom_in_a_template_and_in_code():
    assert match_expr(CAT, "torch.cat([past_k, k], dim=-2)") == {"past": "past_k", "new": "k"}
    assert match_expr("torch.cat([{past}, {new}], dim=-2)", "torch.cat((past_k, k), dim=-2)") == {
        "past": "past_k",
        "new": "k",
    }
    assert match_expr(CAT, "torch.cat((past_k, k), -2)") == {"past": "past_k", "new": "k"}  # positional dim
    assert match_expr(CAT, "torch.cat((past_k, k), dim=-1)") is None


def test_repeated_holes_must_capture_the_same_code():
    assert match_expr("{a} + {a}", "x + x") == {"a": "x"}
    assert match_expr("{a} + {a}", "x + y") is None
    assert match_expr("{a} + {a}", "f(x, y) + f(y, x)") is None


def test_repeated_holes_compare_code_not_layout():
    assert match_expr("{a} + {a}", "f(x,y) + f( x , y )") == {"a": "f(x,y)"}
    assert match_expr("{a}[0] * {a}[1]", "(self.past)[0] * self.past[1]") is not None


def test_repeated_holes_in_statements():
    template = "{presents} = {presents} + ({present},)"
    assert match_stmts(template, "presents = presents + (out[1],)\n") == {"presents": "presents", "present": "out[1]"}
    assert match_stmts(template, "presents = other + (out[1],)\n") is None


def test_bound_holes_only_match_their_value():
    template = "{cache}[0][0].size(-2)"
    assert match_expr(template, "past_key_values[0][0].size(-2)", {"cache": "past_key_values"}) == {
        "cache": "past_key_values"
    }
    assert match_expr(template, "other[0][0].size(-2)", {"cache": "past_key_values"}) is None
    # an attribute value, compared without its layout
    assert match_expr("{layers}[{i}]", "self . h[i]", {"layers": "self.h"}) == {"layers": "self . h", "i": "i"}
    assert match_expr("{layers}[{i}]", "self.heads[i]", {"layers": "self.h"}) is None


def test_bound_values_that_are_not_holes_are_ignored():
    assert match_expr("{a} + 1", "x + 1", {"unused": "y"}) == {"a": "x"}


# ------------------------------------------------------------------------------------------------------------------
# Matching statements
# ------------------------------------------------------------------------------------------------------------------

UNPACK_CAT = """
if {cache} is not None:
    {pk}, {pv} = {cache}
    {k_out} = torch.cat(({pk}, {k}), dim=-2)
"""


def test_statement_patterns_match_a_run_of_statements_at_an_index():
    code = "x = 1\nif past is not None:\n    a, b = past\n    key = torch.cat((a, key), dim=-2)\ny = 2\n"
    assert match_stmts(UNPACK_CAT, code, start=0) is None
    # the unpack is folded into the cat in both the template's view and the code's: a, b become past[0], past[1]
    assert match_stmts(UNPACK_CAT, code, start=1) == {"cache": "past", "k_out": "key", "k": "key"}
    assert match_stmts(UNPACK_CAT, code, start=2) is None  # past the end


def test_statement_patterns_need_the_whole_block():
    code = "if past is not None:\n    a, b = past\n    key = torch.cat((a, key), dim=-2)\n    n = key.shape[-2]\n"
    assert match_stmts(UNPACK_CAT, code) is None


def test_statement_patterns_ignore_comments_and_blank_lines():
    code = (
        "if (past is not None):  # cached\n"
        "\n"
        "    # unpack\n"
        "    a,b = past\n"
        "    key = torch.cat(\n"
        "        (a, key), dim=-2\n"
        "    )\n"
    )
    assert match_stmts(UNPACK_CAT, code) == {"cache": "past", "k_out": "key", "k": "key"}


def test_several_statements_in_sequence():
    template = "{a} = {b}\n{c} = {a} + 1\n"
    assert match_stmts(template, "x = y\nz = x + 1\n") == {"a": "x", "b": "y", "c": "z"}
    assert match_stmts(template, "x = y\nz = w + 1\n") is None
    assert match_stmts(template, "x = y\n") is None


def test_a_hole_alone_among_statements_matches_exactly_one_statement():
    template = "if {c}:\n    x = 1\n    {stmt}\n"
    assert match_stmts(template, "if a:\n    x = 1\n    return 3\n") == {"c": "a", "stmt": "return 3"}
    assert match_stmts(template, "if a:\n    x = 1\n    return 3\n    y = 2\n") is None


def test_body_hole_captures_a_whole_block():
    template = "for {i}, ({block}, {layer}) in enumerate(zip({layers}, {cache})):\n    {body}\n"
    code = (
        "for i, (blk, past) in enumerate(zip(self.h, pasts)):\n"
        "    h = blk(h, past)\n"
        "\n"
        "    # keep going\n"
        "    if use_cache:\n"
        "        out += (h,)\n"
    )
    found = match_stmts(template, code)
    assert found["layers"] == "self.h" and found["cache"] == "pasts"
    assert found["body"] == ["h = blk(h, past)", "# keep going if use_cache: out += (h,)"]


def test_body_hole_in_the_same_template_twice_must_agree():
    template = "if {c}:\n    {body}\nelse:\n    {body}\n"
    assert match_stmts(template, "if a:\n    x = 1\nelse:\n    x = 1\n") is not None
    assert match_stmts(template, "if a:\n    x = 1\nelse:\n    x = 2\n") is None


# ------------------------------------------------------------------------------------------------------------------
# Filling templates
# ------------------------------------------------------------------------------------------------------------------


def test_fill_expression_with_strings_and_nodes():
    filled = fill_expression(
        "{cache}.update({k}, {v}, self.layer_idx)",
        {"cache": "past", "k": "key", "v": cst.parse_expression("value * 2")},
    )
    assert _code(filled) == "past.update(key, value * 2, self.layer_idx)"


def test_fill_expression_keeps_the_layout_of_captured_code():
    captured = match_expression(compile_expression("f({x})"), cst.parse_expression("f(a  +  b)"), {})
    assert cst.Module(body=[]).code_for_node(fill_expression("g({x})", captured)) == "g(a  +  b)"


def test_fill_expression_needs_every_hole():
    with pytest.raises(TemplateError, match="no value: v"):
        fill_expression("{k} + {v}", {"k": "a"})


def test_a_statement_cannot_fill_an_expression_hole():
    statement = cst.parse_statement("x = 1\n").body[0]
    with pytest.raises(TemplateError, match="holds a statement"):
        fill_expression("{a} + 1", {"a": statement})


def test_fill_statements_splices_a_captured_body():
    template = "for {i}, ({block}, {layer}) in enumerate(zip({layers}, {cache})):\n    {body}\n"
    code = "for n, (blk, past) in enumerate(zip(self.h, pasts)):\n    # run it\n    h = blk(h, past)\n    k += 1\n"
    captures = match_statements(compile_statements(template), cst.parse_module(code).body, 0, {})
    filled = fill_statements(
        to_python("for {i}, {block} in enumerate({layers}):\n    {layer} = {cache}\n    {body}\n"), captures
    )
    assert render(filled) == (
        "for n, blk in enumerate(self.h):\n    past = pasts\n    # run it\n    h = blk(h, past)\n    k += 1\n"
    )


def test_fill_statements_replaces_a_statement_hole():
    template = "if {c}:\n    x = 1\n    {stmt}\n"
    captures = match_statements(
        compile_statements(template), cst.parse_module("if a:\n    x = 1\n    return 3\n").body, 0, {}
    )
    filled = fill_statements(to_python("if not {c}:\n    {stmt}\n    y = 0\n"), captures)
    assert render(filled) == "if not a:\n    return 3\n    y = 0\n"


def test_fill_statements_needs_every_hole():
    with pytest.raises(TemplateError, match="no value: b"):
        fill_statements(to_python("{a} = {b}\n"), {"a": "x"})


def test_round_trip_match_then_fill_rewrites_the_idiom():
    pattern = compile_expression("{cache}[0][0].shape[-2]")
    node = cst.parse_expression("past_key_values[0][0].shape[-2]")
    captures = match_expression(pattern, node, {})
    assert _code(fill_expression("{cache}.get_seq_length()", captures)) == "past_key_values.get_seq_length()"


# ------------------------------------------------------------------------------------------------------------------
# Templates themselves
# ------------------------------------------------------------------------------------------------------------------


def test_holes_and_hole_counts():
    assert holes("{a}[{b}] + {a}") == {"a", "b"}
    assert compile_expression("{a}[{b}] + {a}").hole_uses == {"a": 2, "b": 1}
    assert compile_statements("{x} = {y}\n{y} = {x}\n").holes() == {"x", "y"}


def test_to_python_turns_holes_into_identifiers():
    python = to_python("{cache}.update({k})")
    assert "{" not in python
    cst.parse_expression(python)


@pytest.mark.parametrize("template", ["{a} +", "torch.cat(({a}, {b}), dim=-2", "{a} = 1", "lambda: {", ""])
def test_bad_expression_templates_raise_template_error(template):
    with pytest.raises(TemplateError, match="not a Python expression"):
        compile_expression(template)


@pytest.mark.parametrize("template", ["if {a}\n    pass\n", "for {x} in:\n    {body}\n", "return {a} {b}\n"])
def test_bad_statement_templates_raise_template_error(template):
    with pytest.raises(TemplateError, match="not Python statements"):
        compile_statements(template)


def test_code_of_normalises_whitespace_runs():
    assert code_of(cst.parse_expression("f(a,\n      b)")) == "f(a, b)"
    assert code_of(cst.parse_statement("x  =  1\n")) == "x = 1"
