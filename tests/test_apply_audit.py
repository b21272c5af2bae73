"""The edit applier and the region proof, on small inline sources: edits compose, emptied blocks are handled,
conflicts and lost edits are loud, and any change outside the claimed regions is found."""

import textwrap

import libcst as cst
import libcst.matchers as m
import pytest

from cachemigrate.edit.apply import ApplyError, apply_plan
from cachemigrate.proof.audit import Claim, Offsets, claims_of, find_violation
from cachemigrate.edit.edits import Plan, Replace, Splice, remove

SOURCE = textwrap.dedent("""\
    # header
    import torch


    class A:
        x = 1  # keep me

        def forward(self, a, b=None):
            # lead comment
            if b is not None:
                a = a + b
            for i in range(3):
                a = a * 2
                if a:
                    a = a - 1
            return a  # trailing


    def helper(x):
        return x
    """)


def parsed():
    module = cst.parse_module(SOURCE)
    cls = module.body[1]
    forward = cls.body.body[1]
    return module, cls, forward


def path_of(module, node):
    """Ancestors of ``node`` from the module (exclusive of the node), found by search."""

    def walk(current, trail):
        if current is node:
            return trail
        for child in current.children:
            found = walk(child, (*trail, current))
            if found is not None:
                return found
        return None

    return walk(module, ())


def replace(module, node, build, rule="R1", captures=()):
    return Replace(rule, node, build, path_of(module, node), tuple(captures))


def splice(module, block, index, count, build, rule="R1", captures=()):
    return Splice(rule, block, index, count, build, path_of(module, block), tuple(captures))


def applied(module, *edits):
    plan = Plan()
    plan.extend(list(edits))
    result = apply_plan(module, plan)
    return plan, result


def proof(module, plan, result):
    return find_violation(module.code, result.module.code, claims_of(plan, result.extra_claims, Offsets(module)))


def test_a_replaced_expression_changes_only_that_expression_and_passes_the_proof():
    module, _, forward = parsed()
    ret = forward.body.body[-1].body[0]
    plan, result = applied(module, replace(module, ret.value, lambda u, r: cst.parse_expression("a.detach()")))
    assert result.module.code == SOURCE.replace("return a  # trailing", "return a.detach()  # trailing")
    assert proof(module, plan, result) is None


def test_nested_edits_compose_through_a_captured_body():
    """An outer rule re-writes the ``for`` and re-uses its body; an inner rule edits a statement in that body.
    Both edits must be in the result."""
    module, _, forward = parsed()
    loop = forward.body.body[1]
    inner = loop.body.body[0]
    body = tuple(loop.body.body)

    def outer(resolve):
        statements = resolve.statements(body)
        new_loop = cst.parse_statement("for j in range(4):\n    pass\n")
        return [new_loop.with_changes(body=new_loop.body.with_changes(body=statements))]

    plan, result = applied(
        module,
        splice(module, forward.body, 1, 1, outer, rule="OUTER", captures=body),
        replace(module, inner, lambda u, r: cst.parse_statement("a = a * 3\n"), rule="INNER"),
    )
    code = result.module.code
    assert "for j in range(4):" in code and "a = a * 3" in code and "a = a * 2" not in code
    assert proof(module, plan, result) is None


def test_a_statement_removed_inside_a_captured_body_stays_removed():
    module, _, forward = parsed()
    loop = forward.body.body[1]
    body = tuple(loop.body.body)

    def outer(resolve):
        new_loop = cst.parse_statement("for j in range(4):\n    pass\n")
        return [new_loop.with_changes(body=new_loop.body.with_changes(body=resolve.statements(body)))]

    plan, result = applied(
        module,
        splice(module, forward.body, 1, 1, outer, rule="OUTER", captures=body),
        splice(module, loop.body, 0, 1, lambda r: [], rule="INNER"),
    )
    assert "a = a * 2" not in result.module.code and "for j in range(4):" in result.module.code


def test_an_if_emptied_by_removals_goes_when_its_test_is_pure():
    module, _, forward = parsed()
    guarded = forward.body.body[0]
    plan, result = applied(module, splice(module, guarded.body, 0, 1, lambda r: []))
    assert "if b is not None" not in result.module.code
    assert "# lead comment" not in result.module.code  # the if's own leading comment goes with it (claimed)
    assert [rule for rule, node, part in result.extra_claims] == ["R1"]
    assert proof(module, plan, result) is None


def test_an_if_emptied_whose_test_has_a_call_keeps_a_pass():
    source = "def f(x):\n    if check(x):\n        x = 1\n    return x\n"
    module = cst.parse_module(source)
    fn = module.body[0]
    guarded = fn.body.body[0]
    plan, result = applied(module, splice(module, guarded.body, 0, 1, lambda r: []))
    assert result.module.code == "def f(x):\n    if check(x):\n        pass\n    return x\n"
    assert proof(module, plan, result) is None


def test_two_rules_rewriting_the_same_statement_is_an_error():
    module, _, forward = parsed()
    with pytest.raises(ApplyError, match="both rewrite"):
        applied(
            module,
            splice(module, forward.body, 0, 2, lambda r: [], rule="R1"),
            splice(module, forward.body, 1, 1, lambda r: [], rule="R2"),
        )


def test_an_edit_whose_node_is_not_where_it_said_is_an_error():
    module, _, forward = parsed()
    stray = cst.parse_statement("y = 2\n")  # not part of the module
    edit = Replace("R9", stray, remove, path_of(module, forward.body) + (forward.body,))
    with pytest.raises(ApplyError, match="R9"):
        applied(module, edit)


def test_inserts_keep_rule_order_and_land_before_the_statement_and_its_comment():
    module, _, forward = parsed()
    first = cst.parse_statement("x1 = 1\n")
    second = cst.parse_statement("x2 = 2\n")
    plan, result = applied(
        module,
        splice(module, forward.body, 0, 0, lambda r: [first], rule="R1"),
        splice(module, forward.body, 0, 0, lambda r: [second], rule="R2"),
    )
    assert "        x1 = 1\n        x2 = 2\n        # lead comment\n" in result.module.code
    assert proof(module, plan, result) is None


# ------------------------------------------------------------------------------------------------------------------
# The region proof itself
# ------------------------------------------------------------------------------------------------------------------


def test_the_proof_finds_a_change_outside_every_claim():
    module, cls, forward = parsed()
    ret = forward.body.body[-1].body[0]
    plan, result = applied(module, replace(module, ret.value, lambda u, r: cst.parse_expression("a.detach()")))
    tampered = result.module.code.replace("x = 1  # keep me", "x = 2  # keep me")
    claims = claims_of(plan, result.extra_claims, Offsets(module))
    violation = find_violation(module.code, tampered, claims)
    assert violation is not None and violation.line == SOURCE.splitlines().index("    x = 1  # keep me") + 1


@pytest.mark.parametrize(
    "tamper",
    [
        lambda code: code.replace("# header\n", ""),  # a comment lost
        lambda code: code.replace("\n", "\r\n", 1),  # a line ending changed
        lambda code: code.replace("    return x\n", "    return x + 0\n"),  # another function changed
        lambda code: code + "\n",  # a byte appended
        lambda code: code.replace("        for i in range(3):\n", "        for i in range(2):\n"),
    ],
)
def test_the_proof_finds_each_kind_of_unclaimed_damage(tamper):
    module, _, forward = parsed()
    ret = forward.body.body[-1].body[0]
    plan, result = applied(module, replace(module, ret.value, lambda u, r: cst.parse_expression("a.detach()")))
    claims = claims_of(plan, result.extra_claims, Offsets(module))
    assert find_violation(module.code, result.module.code, claims) is None
    assert find_violation(module.code, tamper(result.module.code), claims) is not None


def test_an_insertion_claims_a_point_not_a_region():
    text = "a = 1\nb = 2\n"
    claims = [Claim("R", 6, 6)]
    assert find_violation(text, "a = 1\nnew = 0\nb = 2\n", claims) is None
    assert find_violation(text, "a = 1\nnew = 0\nb = 3\n", claims) is not None
    assert find_violation(text, "new = 0\na = 1\nb = 2\n", claims) is not None  # not where it was claimed


def test_offsets_per_top_level_statement_equal_the_whole_module_positions():
    from libcst.metadata import MetadataWrapper, WhitespaceInclusivePositionProvider

    source = SOURCE.replace("x = 1", "x = 'é'  ") + "\n# footer\n"
    module = cst.parse_module(source)
    whole = MetadataWrapper(module, unsafe_skip_copy=True).resolve(WhitespaceInclusivePositionProvider)
    lines = source.splitlines(keepends=True)
    starts = [sum(len(line) for line in lines[:i]) for i in range(len(lines) + 1)]
    offsets = Offsets(module)
    checked = 0
    for node in m.findall(module, m.SimpleStatementLine() | m.Name() | m.If()):
        where = whole[node]
        expected = (starts[where.start.line - 1] + where.start.column, starts[where.end.line - 1] + where.end.column)
        assert offsets.span(node, path_of(module, node)) == expected
        checked += 1
    assert checked > 20
