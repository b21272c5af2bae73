"""The parts of the action vocabulary that the plan/apply engine added: add_base_class, the after_last_assignment
anchor with after_rule, only_before and {matched} in replace_expression, the user's statements kept by a
replacement (preserve), runs tied together by a folded unpack, and renames reaching built code."""

from pathlib import Path

from test_actions import MODEL, dedent, make_rule, model, run

from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset

RULESET = load_ruleset("4.52")


# ------------------------------------------------------------------------------------------------------------------
# add_base_class
# ------------------------------------------------------------------------------------------------------------------

GENERATE = make_rule(
    "add_base_class",
    {"base": "GenerationMixin", "if_methods": ["prepare_inputs_for_generation"], "if_attributes": ["lm_head"]},
    role="head",
    functions=(),
)

HEADS = """

class TinyForCausalLM(TinyPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.model = TinyModel(config)
        self.lm_head = nn.Linear(4, 10)

    def forward(self, x, past_key_values=None):
        return self.lm_head(self.model(x, past_key_values)[0])


class TinyScorer(TinyPreTrainedModel):
    def forward(self, x, past_key_values=None):
        return x


class TinyAlready(TinyPreTrainedModel, GenerationMixin):
    def prepare_inputs_for_generation(self, input_ids, past_key_values=None):
        return {"input_ids": input_ids}

    def forward(self, x, past_key_values=None):
        return x
"""


def test_add_base_class_gives_generating_heads_the_mixin_once():
    source = model() + HEADS
    code, changes, diagnostics = run(source, GENERATE)
    assert changes == 1 and diagnostics == []
    assert "class TinyForCausalLM(TinyPreTrainedModel, GenerationMixin):" in code  # it builds an lm_head
    assert "class TinyScorer(TinyPreTrainedModel):" in code  # neither: no generate() before, none after
    assert code.count("GenerationMixin)") == 2  # the one that had it is left alone
    again, changes_again, _ = run(code, GENERATE)
    assert changes_again == 0 and again == code


# ------------------------------------------------------------------------------------------------------------------
# insert_statements: after_last_assignment, after_rule
# ------------------------------------------------------------------------------------------------------------------

BODY_WITH_OVERRIDE = """\
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        if self.training:
            use_cache = False
        presents = () if use_cache else None
        for i, (block, layer_past) in enumerate(zip(self.h, past_key_values)):
            x, present = block(x, layer_past=layer_past)
        return x, presents
"""

FRESH = make_rule(
    "insert_statements",
    {
        "anchor": "after_last_assignment",
        "after_assignments": ["use_cache"],
        "template": "if {cache} is None and use_cache:\n    {cache} = DynamicCache()\n",
    },
    role="base_model",
)


def test_after_last_assignment_goes_after_the_last_override_of_the_name():
    code, changes, _ = run(model(BODY_WITH_OVERRIDE), FRESH)
    assert changes == 1
    expected = (
        "            use_cache = False\n"
        "        if past_key_values is None and use_cache:\n"
        "            past_key_values = DynamicCache()\n"
        "        presents = () if use_cache else None\n"
    )
    assert expected in code


def test_the_fresh_cache_comes_after_the_tuple_conversion_of_the_whole_tier():
    """CM010 converts a tuple before its first read; CM024 creates a missing cache once use_cache is final, and
    after CM010's block (after_rule), so that `return_legacy_cache = False` never overwrites it."""
    full = (Path(__file__).resolve().parent.parent / "fixtures" / "4.52" / "full" / "before.py").read_text()
    line = "        use_cache = use_cache if use_cache is not None else self.config.use_cache\n"
    source = full.replace(line, line + "        if self.training:\n            use_cache = False\n")
    assert source != full
    result = migrate_source(source, RULESET, Options(line_length=119))
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    code = result.migrated
    assert code.index("return_legacy_cache = False") < code.index("if past_key_values is None and use_cache:")
    assert code.index("            use_cache = False") < code.index("if past_key_values is None and use_cache:")


# ------------------------------------------------------------------------------------------------------------------
# replace_expression: only_before, {matched}
# ------------------------------------------------------------------------------------------------------------------

PAST_LENGTH_BEFORE_UPDATE = make_rule(
    "replace_expression",
    {
        "pattern": "{cache}[0].shape[-2]",
        "replacement": "{cache}.get_seq_length(self.layer_idx)",
        "only_before": "{k} = torch.cat(({cache}[0], {key}), dim=-2)",
    },
    role="attention",
)


def test_only_before_rewrites_reads_before_the_barrier_and_leaves_the_ones_after():
    source = MODEL.replace(
        "        if layer_past is not None:\n            past_k, past_v = layer_past\n",
        "        n = layer_past[0].shape[-2]\n        if layer_past is not None:\n            past_k, past_v = layer_past\n",
    ).replace(
        "        return q @ k.transpose(-1, -2) @ v, (k, v)\n",
        "        m = layer_past[0].shape[-2]\n        return q @ k.transpose(-1, -2) @ v, (k, v)\n",
    )
    code, changes, _ = run(model_from(source), PAST_LENGTH_BEFORE_UPDATE)
    assert changes == 1
    assert "n = layer_past.get_seq_length(self.layer_idx)" in code
    assert "m = layer_past[0].shape[-2]" in code  # after the update the cache holds the new keys too


def model_from(template: str) -> str:
    from test_actions import MODEL_BODY

    return template.replace("#MODEL_BODY#\n", MODEL_BODY)


GUARD = make_rule(
    "replace_expression",
    {
        "pattern": "is_cross_attention and {cache} is not None",
        "replacement": "{matched} and not isinstance({cache}, Cache)",
    },
)


def test_matched_in_replace_expression_is_the_users_own_spelling():
    source = "def forward(x, past=None):\n    is_cross_attention = x is not None\n    if is_cross_attention and past:\n        return past[0]\n    return x\n"
    code, changes, _ = run(source, GUARD)
    assert changes == 1
    assert "    if is_cross_attention and past and not isinstance(past, Cache):\n" in code  # `past`, as written


# ------------------------------------------------------------------------------------------------------------------
# replace_statements: the user's statements kept; runs tied by a folded unpack
# ------------------------------------------------------------------------------------------------------------------

WRAP = make_rule(
    "replace_statements",
    {
        "pattern": "if {test}:\n    {a} = {b}\n    {c} = {d}\n",
        "replacement": "if {test} and ready:\n    {a} = {b}\n    {c} = {d}\n",
    },
)


def test_a_replacement_keeps_the_matched_statements_it_does_not_change():
    source = dedent("""\
        def forward(x, past=None):
            if x:
                # the first one, with its comment
                y = f(  x )
                z = 2
            return y
        """)
    code, changes, _ = run(source, WRAP)
    assert changes == 1
    assert (
        "    if x and ready:\n        # the first one, with its comment\n        y = f(  x )\n        z = 2\n" in code
    )


ONLY_THE_KEYS = make_rule(
    "replace_statements",
    {"pattern": "{k} = torch.cat(({cache}[0], {key}), dim=-2)", "replacement": "{k} = {cache}.keys_for({key})"},
)


def test_a_run_that_absorbed_an_unpack_is_not_rewritten_without_the_statements_that_need_it():
    """`pk, pv = past` folds into both cats; rewriting only the keys' cat would drop the unpack that the values'
    cat still reads."""
    source = dedent("""\
        def forward(k, v, past=None):
            pk, pv = past
            k = torch.cat((pk, k), dim=-2)
            v = torch.cat((pv, v), dim=-2)
            return k, v
        """)
    code, changes, _ = run(source, ONLY_THE_KEYS)
    assert changes == 0 and code == source
