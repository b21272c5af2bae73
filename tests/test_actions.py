"""One focused test group per action of the rule vocabulary (cachemigrate.actions), on small inline sources.

Each test builds a rule in memory (validated like a rule file), runs only that rule through
``engine.apply_rules`` and checks the exact output: what must change, and what must be left alone."""

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.actions import ACTIONS
from cachemigrate.facts.analysis import analyze
from cachemigrate.engine import Options, apply_rules
from cachemigrate.rules.loader import Rule, RuleError, _Checker, load_ruleset

RULESET = load_ruleset("4.52")
ERA = RULESET.era


def make_rule(action: str, params: dict, role: str = "any", functions=("forward",), **extra) -> Rule:
    rule = Rule(
        id="CM990",
        name="test-rule",
        description="A rule written for a test",
        era="4.52",
        tier="dynamic",
        role=role,
        functions=tuple(functions),
        action=action,
        params=params,
        **extra,
    )
    check = _Checker(Path("inline.toml"), {"params": params})
    check.bound_names = {"cache", "layers", *(f.name for f in ERA.facts), *(f"arg{i}" for i in range(10))}
    ACTIONS[action].validate(rule, check)
    return rule


def run(source: str, rule: Rule, line_length: int = 119):
    """(new code, number of changes, diagnostics as strings) of ``rule`` alone over ``source``."""
    source = textwrap.dedent(source)
    module = cst.parse_module(source)
    info = analyze(module, ERA.cache_names)
    new, applied, diagnostics = apply_rules(module, info, [rule], ERA, "inline.py", Options(line_length=line_length))
    return new.code, applied.get(rule.id, 0), [str(d) for d in diagnostics]


def dedent(code: str) -> str:
    return textwrap.dedent(code)


# A small legacy model with every role; the markers are replaced per test.
MODEL = """\
import torch
from torch import nn
from transformers.modeling_utils import PreTrainedModel


class Attn(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.proj = nn.Linear(4, 12)

    def forward(self, x, layer_past=None):
        q, k, v = self.proj(x).chunk(3, dim=-1)
        if layer_past is not None:
            past_k, past_v = layer_past
            k = torch.cat((past_k, k), dim=-2)
            v = torch.cat((past_v, v), dim=-2)
        return q @ k.transpose(-1, -2) @ v, (k, v)


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn = Attn(config)

    def forward(self, x, layer_past=None):
        return self.attn(x, layer_past=layer_past)


class TinyPreTrainedModel(PreTrainedModel):
    base_model_prefix = "model"


class TinyModel(TinyPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.h = nn.ModuleList([Block(config) for i in range(config.n_layer)])

    def forward(self, x, past_key_values=None, use_cache=None):
#MODEL_BODY#
"""

MODEL_BODY = """\
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        presents = () if use_cache else None
        for i, (block, layer_past) in enumerate(zip(self.h, past_key_values)):
            x, present = block(x, layer_past=layer_past)
            if use_cache:
                presents = presents + (present,)
        return x, presents
"""


def model(body: str = MODEL_BODY) -> str:
    return MODEL.replace("#MODEL_BODY#\n", body)


def only_change(before: str, after: str, old: str, new: str) -> None:
    """``after`` is ``before`` with exactly the text ``old`` replaced by ``new``."""
    assert before.count(old) == 1, old
    assert after == before.replace(old, new)


# ------------------------------------------------------------------------------------------------------------------
# replace_expression
# ------------------------------------------------------------------------------------------------------------------

PAST_LENGTH = make_rule(
    "replace_expression",
    {"patterns": ["{cache}[0][0].size(-2)", "{cache}[0][0].shape[2]"], "replacement": "{cache}.get_seq_length()"},
    role="base_model",
)


def test_replace_expression_rewrites_every_pattern_in_scope():
    body = dedent("""\
        n = past_key_values[0][0].size(-2)
        m = (past_key_values[0][0].shape[2]) + 1
        return x[:, n:m], None
    """)
    source = model(textwrap.indent(body, " " * 8))
    code, changes, diagnostics = run(source, PAST_LENGTH)
    assert changes == 2 and diagnostics == []
    assert "n = past_key_values.get_seq_length()\n" in code
    assert "m = (past_key_values.get_seq_length()) + 1\n" in code  # the parentheses stay
    assert "[0][0]" not in code


def test_replace_expression_leaves_other_roles_and_other_variables():
    helper = "\n\ndef helper(past_key_values):\n    return past_key_values[0][0].size(-2)\n"
    body = "        n = pasts[0][0].size(-2)\n        return x, n\n"  # not the bound cache variable
    source = model(body) + helper
    code, changes, _ = run(source, PAST_LENGTH)
    assert changes == 0 and code == source


def test_replace_expression_skips_the_tuple_branch_of_a_cache_guard():
    rule = make_rule(
        "replace_expression",
        {
            "pattern": "{cache}[0][0].shape[2]",
            "replacement": "{cache}.get_seq_length() if isinstance({cache}, Cache) else {cache}[0][0].shape[2]",
        },
    )
    source = "def forward(x, past=None):\n    return past[0][0].shape[2]\n"
    once, changes, _ = run(source, rule)
    assert changes == 1
    assert (
        once
        == "def forward(x, past=None):\n    return past.get_seq_length() if isinstance(past, Cache) else past[0][0].shape[2]\n"
    )
    twice, changes, _ = run(once, rule)
    assert changes == 0 and twice == once


def test_replace_expression_keeping_the_match_does_not_wrap_its_own_output_again():
    """``{matched} and ...`` holds the pattern again: a second run leaves it, a first run still finds the
    pattern elsewhere in the same chain."""
    rule = make_rule(
        "replace_expression",
        {"pattern": "cross and {cache} is not None", "replacement": "{matched} and written.get(0)"},
    )
    source = "def forward(x, past=None):\n    if cross and past is not None and x:\n        return past\n"
    once, changes, _ = run(source, rule)
    assert changes == 1
    assert (
        once
        == "def forward(x, past=None):\n    if cross and past is not None and written.get(0) and x:\n        return past\n"
    )
    twice, changes, _ = run(once, rule)
    assert changes == 0 and twice == once
    other = "def forward(x, past=None):\n    if cross and past is not None and other.get(0):\n        return past\n"
    _, changes, _ = run(other, rule)
    assert changes == 1


@pytest.mark.parametrize(
    "line, expected",
    [
        ("n = 1 + past[0][0].shape[2] * 2", "n = 1 + (past.n() if isinstance(past, Cache) else past[0][0].shape[2]) * 2"),
        ("n = -past[0][0].shape[2]", "n = -(past.n() if isinstance(past, Cache) else past[0][0].shape[2])"),
        ("n = past[0][0].shape[2] if past is not None else 0",
         "n = (past.n() if isinstance(past, Cache) else past[0][0].shape[2]) if past is not None else 0"),
        ("n = f(past[0][0].shape[2])", "n = f(past.n() if isinstance(past, Cache) else past[0][0].shape[2])"),
        ("n = past[0][0].shape[2]", "n = past.n() if isinstance(past, Cache) else past[0][0].shape[2]"),
    ],
)  # fmt: skip
def test_replace_expression_parenthesises_a_loose_replacement_of_an_operand(line, expected):
    """The written code groups as the planned tree: a conditional that replaces an operand gets parentheses."""
    rule = make_rule(
        "replace_expression",
        {
            "pattern": "{cache}[0][0].shape[2]",
            "replacement": "{cache}.n() if isinstance({cache}, Cache) else {matched}",
        },
    )
    code, changes, _ = run(f"def forward(x, past=None):\n    {line}\n    return n\n", rule)
    assert changes == 1
    assert code.splitlines()[1] == f"    {expected}"


def test_replace_expression_wraps_a_too_long_line():
    rule = make_rule(
        "replace_expression", {"pattern": "{cache}[0]", "replacement": "{cache}.layers_first_entry_with_a_long_name()"}
    )
    source = "def forward(x, past_key_values=None):\n    value = some_function(x, past_key_values[0], another_argument, yet_another_argument)\n"
    code, changes, _ = run(source, rule, line_length=88)
    assert changes == 1
    assert max(len(line) for line in code.splitlines()) <= 88
    assert cst.parse_module(code).code == code


# ------------------------------------------------------------------------------------------------------------------
# replace_statements
# ------------------------------------------------------------------------------------------------------------------

DROP_PLACEHOLDER = make_rule("replace_statements", {"pattern": "{cache} = (None,) * {n}", "replacement": ""})


def test_replace_statements_replaces_a_run_and_keeps_leading_comments():
    rule = make_rule(
        "replace_statements",
        {
            "pattern": "{a}, {b} = {cache}\n{out} = torch.cat(({a}, {new}), dim=-2)\n",
            "replacement": "{out} = {cache}.update({new})",
        },
    )
    source = dedent("""\
        def forward(k, past=None):
            # join the past
            pk, pv = past
            k = torch.cat((pk, k), dim=-2)
            return k
        """)
    code, changes, _ = run(source, rule)
    assert changes == 1
    assert code == "def forward(k, past=None):\n    # join the past\n    k = past.update(k)\n    return k\n"


def test_replace_statements_removal_drops_an_emptied_if():
    source = dedent("""\
        def forward(x, past=None):
            if past is None:
                past = (None,) * 4
            return x
        """)
    code, changes, _ = run(source, DROP_PLACEHOLDER)
    assert changes == 1
    assert code == "def forward(x, past=None):\n    return x\n"


def test_replace_statements_removal_keeps_an_if_with_other_statements():
    source = dedent("""\
        def forward(x, past=None):
            if past is None:
                n = 0
                past = (None,) * 4
            return x
        """)
    code, changes, _ = run(source, DROP_PLACEHOLDER)
    assert changes == 1
    assert code == "def forward(x, past=None):\n    if past is None:\n        n = 0\n    return x\n"


def test_replace_statements_removal_drops_an_emptied_else_and_elif():
    source = dedent("""\
        def forward(x, past=None):
            if x is None:
                x = 0
            elif past is None:
                past = (None,) * 4
            if past is not None:
                n = 1
            else:
                past = (None,) * 4
            return x
        """)
    code, changes, _ = run(source, DROP_PLACEHOLDER)
    assert changes == 2
    assert code == dedent("""\
        def forward(x, past=None):
            if x is None:
                x = 0
            if past is not None:
                n = 1
            return x
        """)


def test_replace_statements_leaves_a_function_with_nothing_left_valid():
    source = "def forward(x, past=None):\n    past = (None,) * 4\n"
    code, changes, _ = run(source, DROP_PLACEHOLDER)
    assert changes == 1
    assert code == "def forward(x, past=None):\n    pass\n"


def test_replace_statements_does_not_match_in_other_functions():
    source = "def forward(x, past=None):\n    return x\n\n\ndef helper(past=None):\n    past = (None,) * 4\n"
    code, changes, _ = run(source, DROP_PLACEHOLDER)
    assert changes == 0 and code == source


WRAP = make_rule(
    "replace_statements",
    {
        "pattern": "if attention_mask is not None:\n    {body}\n",
        "replacement": "if isinstance(past, StaticCache):\n    attention_mask = None\nelse:\n    {matched}\n",
    },
)


def test_replace_statements_wraps_the_matched_code_once():
    source = dedent("""\
        def forward(x, past=None, attention_mask=None):
            x = x + 1

            # prepare the mask
            if attention_mask is not None:
                attention_mask = attention_mask[:, None]  # broadcast
            return x
        """)
    once, changes, _ = run(source, WRAP)
    assert changes == 1
    assert once == dedent("""\
        def forward(x, past=None, attention_mask=None):
            x = x + 1

            # prepare the mask
            if isinstance(past, StaticCache):
                attention_mask = None
            else:
                if attention_mask is not None:
                    attention_mask = attention_mask[:, None]  # broadcast
            return x
        """)
    twice, changes, _ = run(once, WRAP)
    assert changes == 0 and twice == once


# ------------------------------------------------------------------------------------------------------------------
# insert_statements
# ------------------------------------------------------------------------------------------------------------------


def test_insert_statements_at_function_start_goes_after_the_docstring():
    rule = make_rule(
        "insert_statements",
        {"anchor": "function_start", "template": "if isinstance({arg0}, Cache):\n    return {arg0}\n"},
        functions=("_reorder_cache",),
    )
    source = dedent('''\
        class Head:
            @staticmethod
            def _reorder_cache(past, beam_idx):
                """Reorder."""
                return tuple(p[beam_idx] for p in past)
        ''')
    code, changes, _ = run(source, rule)
    assert changes == 1
    assert code == dedent('''\
        class Head:
            @staticmethod
            def _reorder_cache(past, beam_idx):
                """Reorder."""
                if isinstance(past, Cache):
                    return past
                return tuple(p[beam_idx] for p in past)
        ''')
    again, changes, _ = run(code, rule)
    assert changes == 0 and again == code


SETUP = make_rule(
    "insert_statements",
    {
        "anchor": "before_first_use",
        "after_assignments": ["use_cache"],
        "template": "if {cache} is None and use_cache:\n    {cache} = DynamicCache()\n",
    },
    role="base_model",
)


def test_insert_statements_before_first_use_after_the_assignment_it_needs():
    source = model()
    code, changes, diagnostics = run(source, SETUP)
    assert changes == 1 and diagnostics == []
    only_change(
        source,
        code,
        "        for i, (block, layer_past) in enumerate(zip(self.h, past_key_values)):\n",
        "        if past_key_values is None and use_cache:\n"
        "            past_key_values = DynamicCache()\n"
        "        for i, (block, layer_past) in enumerate(zip(self.h, past_key_values)):\n",
    )


def test_insert_statements_needs_the_names_it_reads_after():
    """A block placed after ``is_cross_attention`` is assigned, in a function that has no such flag (ProphetNet's
    n-gram self-attention), is not inserted: it would read a name nothing binds."""
    rule = make_rule(
        "insert_statements",
        {
            "anchor": "before_first_tuple_use",
            "after_assignments": ["is_cross_attention"],
            "template": "part = {cache}.cross if is_cross_attention else {cache}.own\n",
        },
    )
    without = "def forward(x, past_key_value=None):\n    return x + past_key_value[0]\n"
    assert run(without, rule)[:2] == (without, 0)
    flagged = "def forward(x, y=None, past_key_value=None):\n    is_cross_attention = y is not None\n    return x + past_key_value[0]\n"
    code, changes, _ = run(flagged, rule)
    assert changes == 1 and "part = past_key_value.cross if is_cross_attention" in code
    as_parameter = "def forward(x, is_cross_attention=False, past_key_value=None):\n    return x + past_key_value[0]\n"
    assert run(as_parameter, rule)[1] == 1


def test_insert_statements_reports_a_variable_assigned_after_the_first_use():
    body = MODEL_BODY.replace(
        "        use_cache = use_cache if use_cache is not None else self.config.use_cache\n", ""
    )
    body = body.replace(
        "            if use_cache:\n",
        "            use_cache = use_cache if use_cache is not None else self.config.use_cache\n            if use_cache:\n",
    )
    source = model(body)
    code, changes, diagnostics = run(source, SETUP)
    assert changes == 0 and code == source
    line = source.splitlines().index(
        "            use_cache = use_cache if use_cache is not None else self.config.use_cache"
    )
    assert len(diagnostics) == 1
    assert diagnostics[0].startswith(f"inline.py:{line + 1}:13: CM990 ")  # at the assignment, inside the loop
    assert f"`use_cache` is assigned at line {line + 1} inside the loop over the blocks" in diagnostics[0]


def test_insert_statements_reports_a_variable_assigned_after_the_first_use_outside_a_loop():
    body = MODEL_BODY.replace(
        "        use_cache = use_cache if use_cache is not None else self.config.use_cache\n", ""
    )
    body = body.replace("        return x, presents\n", "        use_cache = None\n        return x, presents\n")
    source = model(body)
    code, changes, diagnostics = run(source, SETUP)
    assert changes == 0 and code == source
    line = source.splitlines().index("    def forward(self, x, past_key_values=None, use_cache=None):") + 1
    assert len(diagnostics) == 1
    assert diagnostics[0].startswith(f"inline.py:{line}:5: CM990 ")
    assert "`past_key_values` is read before `use_cache` is assigned" in diagnostics[0]


def test_insert_statements_reports_a_variable_assigned_inside_the_block_loop_once_at_the_assignment():
    """The Q-Formers and BROS turn caching off inside the loop, under gradient checkpointing: one diagnostic, at
    the assignment, that says where and why; a required rule that said why is not reported again as CM901."""
    body = MODEL_BODY.replace(
        "            x, present = block(x, layer_past=layer_past)\n",
        "            if self.training:\n                use_cache = False\n"
        "            x, present = block(x, layer_past=layer_past)\n",
    )
    body = body.replace("        use_cache = use_cache if use_cache is not None else self.config.use_cache\n", "")
    source = model(body)
    required = make_rule("insert_statements", SETUP.params, role="base_model", required=True)
    code, changes, diagnostics = run(source, required)
    assert changes == 0 and code == source
    line = source.splitlines().index("                use_cache = False") + 1
    loop = source.splitlines().index("        for i, (block, layer_past) in enumerate(zip(self.h, past_key_values)):")
    assert len(diagnostics) == 1, diagnostics
    assert diagnostics[0].startswith(f"inline.py:{line}:17: CM990 ")
    assert f"`use_cache` is assigned at line {line} inside the loop over the blocks" in diagnostics[0]
    assert f"after the statement at line {loop + 1}, which reads `past_key_values`" in diagnostics[0]


def test_insert_statements_after_the_block_loop_only():
    rule = make_rule("insert_statements", {"anchor": "after_loop", "template": "done = {layers}"}, role="base_model")
    body = "        for norm in self.heads:\n            x = norm(x)\n" + MODEL_BODY
    source = model(body)
    code, changes, _ = run(source, rule)
    assert changes == 1
    only_change(
        source,
        code,
        "                presents = presents + (present,)\n",
        "                presents = presents + (present,)\n        done = self.h\n",
    )


@pytest.mark.parametrize(
    "loop, block, inserted",
    [
        ("for i in range(self.config.n_layer):", "self.h[i]", True),  # BLIP's text encoder, the Q-Formers
        ("for i, past in enumerate(past_key_values):", "self.h[i]", True),  # GPTSAN: a loop over the past
        ("for i in range(self.config.n_layer):", "self.h[0]", False),  # not indexed by the loop variable
        ("for i in range(self.config.n_layer):", "self.heads[i]", False),  # another module list
    ],
)
def test_insert_statements_after_a_range_loop_that_indexes_the_blocks(loop, block, inserted):
    rule = make_rule("insert_statements", {"anchor": "after_loop", "template": "done = {layers}"}, role="base_model")
    body = MODEL_BODY.replace(
        "        for i, (block, layer_past) in enumerate(zip(self.h, past_key_values)):\n",
        f"        {loop}\n            block, layer_past = {block}, past_key_values[i]\n",
    )
    source = model(body)
    code, changes, _ = run(source, rule)
    if not inserted:
        assert changes == 0 and code == source
        return
    assert changes == 1
    only_change(
        source,
        code,
        "                presents = presents + (present,)\n",
        "                presents = presents + (present,)\n        done = self.h\n",
    )


# ------------------------------------------------------------------------------------------------------------------
# add_parameter
# ------------------------------------------------------------------------------------------------------------------

CACHE_POSITION = make_rule(
    "add_parameter", {"name": "cache_position", "default": "None", "unless_var_kwargs": True}, functions=("forward",)
)


@pytest.mark.parametrize(
    "signature, expected",
    [
        pytest.param(
            "def forward(self, x, past=None):",
            "def forward(self, x, past=None, cache_position=None):",
            id="one-line",
        ),
        pytest.param(
            "def forward(\n    self,\n    x,\n    past=None,\n):",
            "def forward(\n    self,\n    x,\n    past=None,\n    cache_position=None,\n):",
            id="one-per-line-trailing-comma",
        ),
        pytest.param(
            "def forward(\n    self,\n    x,\n    past=None\n):",
            "def forward(\n    self,\n    x,\n    past=None,\n    cache_position=None\n):",
            id="one-per-line-no-trailing-comma",
        ),
        pytest.param(
            "def forward(\n    self, x, past=None\n):",
            "def forward(\n    self, x, past=None, cache_position=None\n):",
            id="closing-paren-on-its-own-line",
        ),
        pytest.param(
            "def forward(\n    self,\n    x,  # input\n    past=None,  # the cache\n):",
            "def forward(\n    self,\n    x,  # input\n    past=None,  # the cache\n    cache_position=None,\n):",
            id="comments-stay-on-their-line",
        ),
        pytest.param(
            "def forward(self, x, *args, past=None):",
            "def forward(self, x, *args, past=None, cache_position=None):",
            id="keyword-only-after-star-args",
        ),
        pytest.param(
            "def forward(self, x: torch.Tensor, past: Optional[tuple] = None) -> torch.Tensor:",
            "def forward(self, x: torch.Tensor, past: Optional[tuple] = None, cache_position=None) -> torch.Tensor:",
            id="annotated",
        ),
    ],
)
def test_add_parameter_appends_last_in_the_signature_layout(signature, expected):
    source = f"{signature}\n    return x\n"
    code, changes, _ = run(source, CACHE_POSITION)
    assert changes == 1
    assert code == f"{expected}\n    return x\n"


@pytest.mark.parametrize(
    "signature",
    [
        "def forward(self, x, past=None, **kwargs):",
        "def forward(self, x, past=None, cache_position=None):",
        "def forward(self, x, *, cache_position=None):",
        "def other(self, x, past=None):",  # not one of the rule's functions
    ],
)
def test_add_parameter_leaves_signatures_that_need_nothing(signature):
    source = f"{signature}\n    return x\n"
    code, changes, _ = run(source, CACHE_POSITION)
    assert changes == 0 and code == source


def test_add_parameter_with_annotation_and_var_kwargs_allowed():
    rule = make_rule(
        "add_parameter", {"name": "cache_position", "default": "None", "annotation": "Optional[torch.LongTensor]"}
    )
    source = "def forward(self, x, **kwargs):\n    return x\n"
    code, changes, _ = run(source, rule)
    assert changes == 1
    assert code == "def forward(self, x, cache_position: Optional[torch.LongTensor] = None, **kwargs):\n    return x\n"


# ------------------------------------------------------------------------------------------------------------------
# set_class_attribute
# ------------------------------------------------------------------------------------------------------------------

FLAG = make_rule(
    "set_class_attribute", {"name": "_supports_cache_class", "value": "True"}, role="pretrained", functions=()
)


def test_set_class_attribute_inserts_after_the_docstring_and_assignments():
    source = model().replace(
        '    base_model_prefix = "model"\n',
        '    """Base class."""\n\n    base_model_prefix = "model"\n    main_input_name = "x"\n\n    def _init_weights(self, module):\n        pass\n',
    )
    code, changes, _ = run(source, FLAG)
    assert changes == 1
    only_change(
        source, code, '    main_input_name = "x"\n', '    main_input_name = "x"\n    _supports_cache_class = True\n'
    )


def test_set_class_attribute_updates_an_existing_value():
    source = model().replace(
        '    base_model_prefix = "model"\n',
        '    _supports_cache_class = False  # not yet\n    base_model_prefix = "model"\n',
    )
    code, changes, _ = run(source, FLAG)
    assert changes == 1
    only_change(source, code, "_supports_cache_class = False", "_supports_cache_class = True")


def test_set_class_attribute_is_a_no_op_when_already_set():
    source = model().replace(
        '    base_model_prefix = "model"\n', '    base_model_prefix = "model"\n    _supports_cache_class = True\n'
    )
    code, changes, _ = run(source, FLAG)
    assert changes == 0 and code == source


def test_set_class_attribute_only_touches_the_role():
    code, changes, _ = run(model(), FLAG)
    assert changes == 1
    assert code.count("_supports_cache_class = True") == 1
    assert code.index("_supports_cache_class") > code.index("class TinyPreTrainedModel")
    assert code.index("_supports_cache_class") < code.index("class TinyModel")


# ------------------------------------------------------------------------------------------------------------------
# thread_layer_idx
# ------------------------------------------------------------------------------------------------------------------

THREAD = make_rule("thread_layer_idx", {"name": "layer_idx"}, functions=("__init__",))


def test_thread_layer_idx_renames_an_underscore_loop_variable():
    source = model().replace("for i in range(config.n_layer)", "for _ in range(config.n_layer)")
    code, changes, diagnostics = run(source, THREAD)
    assert diagnostics == []
    assert changes == 5  # attention: parameter + store; block: parameter + keyword; model: keyword
    assert (
        "self.h = nn.ModuleList([Block(config, layer_idx=layer_idx) for layer_idx in range(config.n_layer)])\n" in code
    )
    assert (
        "    def __init__(self, config, layer_idx=None):\n        super().__init__()\n        self.attn = Attn(config, layer_idx=layer_idx)\n"
        in code
    )
    assert "        self.proj = nn.Linear(4, 12)\n        self.layer_idx = layer_idx\n" in code


def test_thread_layer_idx_keeps_a_named_loop_variable_and_is_idempotent():
    code, changes, _ = run(model(), THREAD)
    assert "[Block(config, layer_idx=i) for i in range(config.n_layer)]" in code
    again, changes, _ = run(code, THREAD)
    assert changes == 0 and again == code


def test_thread_layer_idx_reports_a_loop_target_that_is_not_one_name():
    source = model().replace(
        "[Block(config) for i in range(config.n_layer)]",
        "[Block(config) for i, _ in enumerate(range(config.n_layer))]",
    )
    code, changes, diagnostics = run(source, THREAD)
    assert any("its ModuleList loop target is not one name" in d for d in diagnostics)
    assert "for i, _ in enumerate(range(config.n_layer))]" in code


def test_thread_layer_idx_sees_an_index_the_block_already_takes_by_position():
    # InstructBLIP's Q-Former: `QFormerLayer(config, layer_idx)`; before, a second `layer_idx=` made a TypeError
    source = (
        model()
        .replace(
            "    def __init__(self, config):\n        super().__init__()\n        self.attn = Attn(config)\n",
            "    def __init__(self, config, layer_idx):\n        super().__init__()\n        self.attn = Attn(config)\n"
            "        self.layer_idx = layer_idx\n",
        )
        .replace("[Block(config) for i in range(config.n_layer)]", "[Block(config, i) for i in range(config.n_layer)]")
    )
    code, changes, diagnostics = run(source, THREAD)
    assert diagnostics == []
    assert "[Block(config, i) for i in range(config.n_layer)]" in code  # no second layer index
    assert "        self.attn = Attn(config, layer_idx=layer_idx)\n" in code
    assert code.count("self.layer_idx = layer_idx") == 2  # the block's own, and the attention's new one
    assert changes == 3  # attention: parameter + store; block: keyword to the attention


REBUILD = """
    def set_config(self, config):
        self.config = config
        self.attn = Attn(config)
"""


def test_thread_layer_idx_gives_an_attention_rebuilt_by_its_block_the_blocks_index():
    source = model().replace("        self.attn = Attn(config)\n", "        self.attn = Attn(config)\n" + REBUILD, 1)
    code, changes, diagnostics = run(source, THREAD)
    assert diagnostics == []
    assert "        self.attn = Attn(config, layer_idx=layer_idx)\n        self.layer_idx = layer_idx\n" in code
    assert "        self.attn = Attn(config, layer_idx=self.layer_idx)\n" in code
    again, changes, _ = run(code, THREAD)
    assert changes == 0 and again == code


def test_thread_layer_idx_leaves_a_rebuilt_module_that_takes_no_cache_alone():
    source = model().replace("        self.attn = Attn(config)\n", "        self.attn = Attn(config)\n" + REBUILD, 1)
    source = source.replace(
        "        self.attn = Attn(config)\n\n    def forward", "        self.attn = nn.Linear(4, 4)\n\n    def forward"
    )
    code, _, diagnostics = run(source, THREAD)
    assert diagnostics == []
    assert "        self.attn = nn.Linear(4, 4)\n" in code
    assert "self.layer_idx = layer_idx\n        self.attn = Attn" not in code
    block = code[code.index("class Block") : code.index("class TinyPreTrainedModel")]
    assert "self.layer_idx" not in block  # the block rebuilds nothing that caches: it stores no index


def test_thread_layer_idx_refuses_an_attention_rebuilt_where_no_layer_index_is_held():
    rebuild = "    def reset_first(self):\n        self.h[0].attn = Attn(self.config)\n\n    def forward(self, x, past_key_values"
    source = model().replace("    def forward(self, x, past_key_values", rebuild, 1)
    code, _, diagnostics = run(source, THREAD)
    line = source.splitlines().index("        self.h[0].attn = Attn(self.config)") + 1
    assert len(diagnostics) == 1
    assert diagnostics[0].startswith(f"inline.py:{line}:")
    assert "TinyModel.reset_first builds Attn(...) outside `__init__`" in diagnostics[0]
    assert "        self.h[0].attn = Attn(self.config)\n" in code


# ------------------------------------------------------------------------------------------------------------------
# pass_argument, add_method, rename_parameter (static and upstream tiers)
# ------------------------------------------------------------------------------------------------------------------

PASS = make_rule("pass_argument", {"name": "cache_position", "target_role": "block"}, role="base_model")


def test_pass_argument_adds_a_keyword_and_follows_a_positional_checkpoint_call():
    body = MODEL_BODY.replace(
        "            x, present = block(x, layer_past=layer_past)\n",
        "            if self.gradient_checkpointing:\n"
        "                x, present = self._gradient_checkpointing_func(block.__call__, x, None)\n"
        "            else:\n"
        "                x, present = block(x, layer_past=layer_past)\n",
    )
    source = model(body)
    code, changes, diagnostics = run(source, PASS)
    assert changes == 2 and diagnostics == []
    assert "self._gradient_checkpointing_func(block.__call__, x, None, cache_position)\n" in code
    assert "block(x, layer_past=layer_past, cache_position=cache_position)\n" in code
    again, changes, _ = run(code, PASS)
    assert changes == 0 and again == code


def test_pass_argument_reports_a_checkpoint_call_with_missing_arguments():
    body = MODEL_BODY.replace(
        "            x, present = block(x, layer_past=layer_past)\n",
        "            x, present = self._gradient_checkpointing_func(block.__call__, x)\n",
    )
    code, changes, diagnostics = run(model(body), PASS)
    assert changes == 0
    assert len(diagnostics) == 1 and "it passes 1 arguments, the called forward takes 2" in diagnostics[0]


def test_add_method_adds_once():
    rule = make_rule(
        "add_method", {"template": "def _mask(self, x):\n    return x\n"}, role="base_model", functions=()
    )
    code, changes, _ = run(model(), rule)
    assert changes == 1
    assert code.endswith("        return x, presents\n\n    def _mask(self, x):\n        return x\n")
    again, changes, _ = run(code, rule)
    assert changes == 0 and again == code


RENAME = make_rule(
    "rename_parameter",
    {"old": "layer_past", "new": "past_key_value", "deprecate": True, "version": "4.56.0"},
    role="attention",
)


def test_rename_parameter_renames_uses_and_call_sites_behind_deprecate_kwarg():
    source = model()
    code, changes, diagnostics = run(source, RENAME)
    assert diagnostics == [] and changes == 2
    assert (
        '    @deprecate_kwarg("layer_past", version="4.56.0", new_name="past_key_value", raise_if_both_names=True)\n'
        "    def forward(self, x, past_key_value=None):\n"
    ) in code
    assert "        if past_key_value is not None:\n            past_k, past_v = past_key_value\n" in code
    assert "return self.attn(x, past_key_value=layer_past)" in code  # the block's own parameter keeps its name
    assert "x, present = block(x, layer_past=layer_past)" in code  # a call to a block, not to the attention


def test_rename_parameter_reports_a_clash():
    source = model().replace(
        "        q, k, v = self.proj(x)", "        past_key_value = None\n        q, k, v = self.proj(x)"
    )
    _, _, diagnostics = run(source, RENAME)
    assert any("cannot rename `layer_past` to `past_key_value`" in d for d in diagnostics)


# ------------------------------------------------------------------------------------------------------------------
# Parameter validation, per action
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "action, params, key",
    [
        ("replace_expression", {"replacement": "x"}, "params.pattern"),
        ("replace_expression", {"pattern": "{a}[0", "replacement": "{a}"}, "params.pattern"),
        ("replace_expression", {"pattern": "{a}[0]", "replacement": "{b}"}, "params.replacement"),
        ("replace_statements", {"patterns": ["x = 1", 3], "replacement": ""}, "params.patterns"),
        ("replace_statements", {"pattern": "x = 1", "replacement": "if:"}, "params.replacement"),
        ("insert_statements", {"anchor": "somewhere", "template": "x = 1"}, "params.anchor"),
        ("insert_statements", {"anchor": "function_start", "template": "x = {nothing}"}, "params.template"),
        ("add_parameter", {"name": "p", "default": "= 1"}, "params.default"),
        ("add_parameter", {"name": "p"}, "params.default"),
        ("set_class_attribute", {"name": "flag", "value": "True", "extra": 1}, "params.extra"),
        ("thread_layer_idx", {"name": 3}, "params.name"),
        ("pass_argument", {"name": "p", "target_role": "head"}, "params.target_role"),
        ("add_method", {"template": "x = 1"}, "params.template"),
        ("rename_parameter", {"old": "a", "new": "b", "deprecate": True}, "params.version"),
        ("refuse_passed_with", {"pattern": "x = 1", "keywords": ["k"], "message": "m"}, "params.patterns"),
        ("refuse_passed_with", {"pattern": "{value} = 1", "keywords": "k", "message": "m"}, "params.keywords"),
        (
            "insert_after_passed_with",
            {"pattern": "{value} = 1", "keywords": ["k"], "template": "if:"},
            "params.template",
        ),
        ("insert_after_passed_with", {"pattern": "{value} = 1", "keywords": ["k"]}, "params.template"),
        ("replace_statements", {"patterns": ["x = 1", "y = 1"], "replacements": [""]}, "params.replacements"),
        ("replace_statements", {"patterns": ["{a} = 1"], "replacements": ["{b} = 2"]}, "params.replacements[0]"),
        ("replace_statements", {"pattern": "x = 1"}, "params.replacement"),
        ("replace_statements", {"pattern": "x = 1", "replacement": "", "replacements": [""]}, "params.replacement"),
    ],
)
def test_bad_parameters_are_rule_errors_naming_the_key(action, params, key):
    with pytest.raises(RuleError) as error:
        make_rule(action, params)
    message = str(error.value)
    assert f"`{key}`" in message and "expected" in message
