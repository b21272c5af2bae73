"""The normalised views (cachemigrate.views.normalize, cachemigrate.views.ranks): which spellings read the same to a rule, and
the near-misses that must not. Views are for matching only; the tests also check that untouched parts of a
view are the original nodes (a capture is the user's code)."""

import textwrap

import libcst as cst
import libcst.matchers as m
import pytest

from cachemigrate.views.normalize import FunctionViews
from cachemigrate.views.patterns import code_of
from cachemigrate.views.ranks import RankScope


def views_of(body: str, caches=("past", "layer_past", "past_key_values"), cache_rank=None):
    source = "def forward(self, x, past=None, layer_past=None, past_key_values=None):\n" + textwrap.indent(
        textwrap.dedent(body), "    "
    )
    function = cst.parse_module(source).body[0]
    return function, FunctionViews(function, set(caches), RankScope(), cache_rank)


def block_codes(body: str, **kwargs) -> list[str]:
    function, views = views_of(body, **kwargs)
    return [code_of(v.node) for v in views.block(function.body)]


def last(body: str, **kwargs) -> str:
    return block_codes(body, **kwargs)[-1]


# ------------------------------------------------------------------------------------------------------------------
# Concatenation and sizes
# ------------------------------------------------------------------------------------------------------------------

RANK4 = "k = self.proj(x).view(b, s, h, d).transpose(1, 2)\n"


@pytest.mark.parametrize(
    "spelling",
    [
        "k = torch.cat((past[0], k), dim=-2)",
        "k = torch.cat([past[0], k], dim=-2)",
        "k = torch.cat((past[0], k), -2)",
        "k = torch.cat([past[0], k], dim=2)",
        "k = torch.cat((past[0], k), 2)",
        "k = torch.concat((past[0], k), axis=2)",
    ],
)
def test_every_spelling_of_the_concatenation_reads_the_same(spelling):
    assert last(RANK4 + spelling + "\n") == "k = torch.cat((past[0], k), dim = -2)"


def test_a_positive_dim_of_unknown_rank_stays_as_written():
    assert last("k = self.proj(x)\nk = torch.cat([past[0], k], dim=2)\n") == "k = torch.cat((past[0], k), dim = 2)"


def test_dim_2_on_a_rank_3_tensor_is_the_last_axis_not_the_sequence_axis():
    """BLOOM's keys are [batch*heads, head_dim, seq]: dim=2 there is -1, never -2."""
    code = "k = k.reshape(b * h, d, s)\nk = torch.cat((past[0], k), dim=2)\n"
    assert last(code) == "k = torch.cat((past[0], k), dim = -1)"


def test_ranks_follow_methods_and_functions_of_the_same_code():
    code = (
        "k = k.view(b, s, h, d).permute(0, 2, 1, 3)\nq, k = rotary(q, k, cos, sin)\nk = torch.cat([past[0], k], 2)\n"
    )
    assert last(code) == "k = torch.cat((past[0], k), dim = -2)"  # `q, k = f(q, k, ...)` keeps k's rank


def test_the_cache_tensors_have_the_rank_of_the_layout():
    assert last("n = past_key_values[0][0].size(2)\n", cache_rank=4) == "n = past_key_values[0][0].shape[-2]"
    assert last("n = layer_past[0].shape[2]\n", cache_rank=4) == "n = layer_past[0].shape[-2]"
    assert last("n = past_key_values[0][0].size(2)\n") == "n = past_key_values[0][0].shape[2]"  # rank unknown


@pytest.mark.parametrize("spelling", ["n = x.size(-2)", "n = x.size()[-2]", "n = x.shape[-2]"])
def test_size_and_shape_read_the_same(spelling):
    assert last(spelling + "\n") == "n = x.shape[-2]"


# ------------------------------------------------------------------------------------------------------------------
# Tests against None and truthiness
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "test, expected",
    [
        ("past is not None", "past is not None"),
        ("past != None", "past is not None"),
        ("None is not past", "past is not None"),
        ("past", "past is not None"),
        ("past == None", "past is None"),
        ("not past", "past is None"),
    ],
)
def test_every_spelling_of_is_there_a_past(test, expected):
    assert last(f"if {test}:\n    y = 1\n").startswith(f"if {expected}:")


def test_truthiness_of_something_that_is_not_a_cache_is_left_alone():
    assert last("if use_cache:\n    y = 1\n").startswith("if use_cache:")


def test_a_flag_assigned_once_from_a_cache_test_stands_for_the_test():
    codes = block_codes("has_past = layer_past is not None\nif has_past:\n    y = 1\n")
    assert codes[-1].startswith("if layer_past is not None:")


def test_a_flag_assigned_twice_is_not_a_test():
    codes = block_codes("has_past = layer_past is not None\nhas_past = False\nif has_past:\n    y = 1\n")
    assert codes[-1].startswith("if has_past:")


def test_truthiness_inside_and_and_ifexp():
    assert last("y = past and past[0]\n") == "y = past is not None and past[0]"
    assert last("y = past[0] if past else None\n") == "y = past[0] if past is not None else None"


# ------------------------------------------------------------------------------------------------------------------
# Unpacking folded into what follows
# ------------------------------------------------------------------------------------------------------------------

FOLDED = ["k = torch.cat((past[0], k), dim = -2)", "v = torch.cat((past[1], v), dim = -2)"]


@pytest.mark.parametrize(
    "unpack",
    [
        "pk, pv = past",
        "(pk, pv) = past",
        "[pk, pv] = past",
        "pk, pv = past[0], past[1]",
        "pk = past[0]\npv = past[1]",
    ],
)
def test_every_unpack_of_a_layer_past_folds_into_the_concatenation(unpack):
    code = f"{unpack}\nk = torch.cat((pk, k), dim=-2)\nv = torch.cat((pv, v), dim=-2)\n"
    function, views = views_of(code)
    block = views.block(function.body)
    assert [code_of(v.node) for v in block] == FOLDED
    first = block[0]
    assert first.start == 0 and first.count == len(unpack.splitlines()) + 1  # the view stands for both


def test_an_unpack_whose_names_are_read_later_is_folded_there_too_and_ties_the_statements_together():
    code = "pk, pv = past\nk = torch.cat((pk, k), dim=-2)\nn = pk.shape[-2]\n"
    function, views = views_of(code)
    block = views.block(function.body)
    assert [code_of(v.node) for v in block] == ["k = torch.cat((past[0], k), dim = -2)", "n = past[0].shape[-2]"]
    # a rule rewriting only the first view would drop the unpack the second still needs
    assert views.requires[block[0].node] == [block[1].node]


def test_an_unpack_whose_names_are_reassigned_is_not_folded():
    code = "pk, pv = past\nk = torch.cat((pk, k), dim=-2)\npk = 0\n"
    assert block_codes(code)[0] == "pk, pv = past"


def test_an_unpack_of_something_that_is_not_a_cache_is_not_folded():
    assert block_codes("a, b = pair\nk = torch.cat((a, k), dim=-2)\n")[0] == "a, b = pair"


def test_a_compound_statement_is_viewed_with_its_blocks():
    code = "if past is not None:\n    pk, pv = past\n    k = torch.cat((pk, k), dim=-2)\n    v = torch.cat((pv, v), dim=-2)\n"
    assert last(code) == "if past is not None: " + " ".join(FOLDED)


def test_untouched_parts_of_a_view_are_the_original_nodes():
    function, views = views_of(RANK4 + "k = torch.cat([past[0], k], dim=2)\n")
    statement = function.body.body[1]
    view = views.view(statement)
    original_k = statement.body[0].value.args[0].value.elements[1].value
    viewed = view.body[0].value.args[0].value.elements[1].value
    assert viewed is original_k


def test_originals_turns_a_captured_view_back_into_the_users_statements():
    code = "pk, pv = past\nk = torch.cat((pk, k), dim=-2)\nv = torch.cat((pv, v), dim=-2)\n"
    function, views = views_of(code)
    block = views.block(function.body)
    run = views.originals(tuple(v.node for v in block))
    assert run == tuple(function.body.body)
    assert [code_of(s) for s in run][0] == "pk, pv = past"
    assert not m.findall(cst.Module(body=list(run)), m.Name("FOLDED"))


# ------------------------------------------------------------------------------------------------------------------
# A lone element read by the next statement; ranks through a shape tuple and the parts of a chunk
# ------------------------------------------------------------------------------------------------------------------


def test_a_lone_element_read_by_the_next_statement_is_folded_into_it():
    """`earlier = past[0]` then `k = torch.cat((earlier, k), ...)`, the value read the same way further down: each
    read is folded into its concatenation, which then stands for both statements."""
    code = (
        "earlier_k = past[0]\nk = torch.cat((earlier_k, k), dim=-2)\n"
        "earlier_v = past[1]\nv = torch.cat((earlier_v, v), dim=-2)\n"
    )
    function, views = views_of(code)
    block = views.block(function.body)
    assert [code_of(v.node) for v in block] == FOLDED
    assert [(v.start, v.count) for v in block] == [(0, 2), (2, 2)]


@pytest.mark.parametrize(
    "code",
    [
        "earlier_k = past[0]\nk = torch.cat((earlier_k, k), dim=-2)\nn = earlier_k.shape[-2]\n",  # read again later
        "earlier_k = past[0]\nk = self.proj(x)\nk = torch.cat((earlier_k, k), dim=-2)\n",  # not by the next one
        "earlier_k = past[0]\nk = torch.cat((k, k), dim=-2)\n",  # never read
        "earlier_k = pair[0]\nk = torch.cat((earlier_k, k), dim=-2)\n",  # not a cache
    ],
)
def test_a_lone_element_read_elsewhere_or_not_a_cache_is_not_folded(code):
    assert block_codes(code)[0] == code.splitlines()[0]


@pytest.mark.parametrize(
    "prefix",
    [
        "shape = (b, h, -1, d)\nk = self.proj(x).view(*shape)\n",
        "k = self.proj(x).view(b, h, -1, d)\nparts = k.chunk(3, dim=2)\nk = parts[0]\n",
        "shape = (b, h, -1, d)\nk = self.proj(x).view(*shape)\nparts = k.chunk(3, dim=2)\nk, rest = parts[0], parts[1:]\n",
    ],
)
def test_ranks_follow_a_shape_tuple_and_the_parts_of_a_chunk(prefix):
    assert last(prefix + "k = torch.cat((past[0], k), dim=2)\n") == "k = torch.cat((past[0], k), dim = -2)"


@pytest.mark.parametrize(
    "prefix",
    [
        "shape = (b, h, -1, d)\nshape = make()\nk = self.proj(x).view(*shape)\n",  # rebound to something unknown
        "k = self.proj(x).view(b, h, -1, d)\nparts = k.chunk(3, dim=2)\nk = parts[i]\n",  # not a literal index
        "k = self.proj(x).view(b, h, -1, d)\nparts = k.chunk(3, dim=2)\nk = parts[1:]\n",  # a list, not a tensor
    ],
)
def test_an_unknown_shape_or_part_keeps_the_rank_unknown(prefix):
    assert last(prefix + "k = torch.cat((past[0], k), dim=2)\n") == "k = torch.cat((past[0], k), dim = 2)"
