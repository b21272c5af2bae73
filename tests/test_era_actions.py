"""The actions the eras after 4.52 brought (drop_import, replace_class_statements, tie_weights_mapping, add_method
with ``if_used``), each on small inline sources through ``engine.apply_rules``, in the style of test_actions.py."""

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.actions import ACTIONS
from cachemigrate.facts.analysis import analyze
from cachemigrate.engine import Options, apply_rules
from cachemigrate.rules.loader import Rule, RuleError, _Checker, load_ruleset

RULESET = load_ruleset("5")
ERA = RULESET.era
REPO = Path(__file__).resolve().parent.parent


def make_rule(action: str, params: dict, role: str = "any", functions=(), **extra) -> Rule:
    rule = Rule(
        id="CM990",
        name="test-rule",
        description="A rule written for a test",
        era="5",
        tier="dynamic",
        role=role,
        functions=tuple(functions),
        action=action,
        params=params,
        path=extra.pop("path", REPO / "rules" / "5" / "CM990.toml"),
        **extra,
    )
    check = _Checker(Path("inline.toml"), {"params": params})
    check.bound_names = {"cache", *(f.name for f in ERA.facts)}
    ACTIONS[action].validate(rule, check)
    return rule


def run(source: str, *rules: Rule):
    """(new code, changes per rule, diagnostics as strings) of ``rules`` alone over ``source``."""
    module = cst.parse_module(textwrap.dedent(source))
    info = analyze(module, ERA.cache_names)
    new, applied, diagnostics = apply_rules(module, info, list(rules), ERA, "inline.py", Options(line_length=119))
    return new.code, applied, [str(d) for d in diagnostics]


def d(code: str) -> str:
    return textwrap.dedent(code)


# ------------------------------------------------------------------------------------------------------------------
# drop_import
# ------------------------------------------------------------------------------------------------------------------

FX = make_rule(
    "drop_import", {"module": "utils", "names": ["is_torch_fx_available"]}, helpers=("compat:is_torch_fx_available",)
)
FX_HELPER = '''

def is_torch_fx_available():
    """torch.fx can be used (vendored by cachemigrate; transformers 5.x removed this helper: every torch it
    supports, >= 2.6, has torch.fx)."""
    return True
'''


def test_drop_import_takes_the_name_out_and_vendors_it_before_the_first_class():
    source = d("""\
        from torch import nn
        from transformers.utils import is_torch_fx_available, logging


        class A(nn.Module):
            def f(self):
                return is_torch_fx_available()
        """)
    new, applied, diagnostics = run(source, FX)
    assert diagnostics == [] and applied == {"CM990": 1}
    head = "from torch import nn\nfrom transformers.utils import logging\n"
    assert new == head + FX_HELPER + source[source.index("\n\nclass A") :]


def test_drop_import_removes_an_import_left_without_names_and_keeps_parentheses():
    source = d("""\
        from transformers.utils import (
            is_torch_fx_available,
        )
        from ...utils import (
            logging,
            is_torch_fx_available,
        )


        class A:
            pass
        """)
    new, applied, _ = run(source, FX)
    assert applied == {"CM990": 2}
    assert new.startswith("from ...utils import (\n    logging,\n)\n")
    assert "from transformers.utils import" not in new
    assert new.count("def is_torch_fx_available") == 1


@pytest.mark.parametrize(
    "line",
    [
        "from transformers.utils import is_torch_fx_available as fx_ok",  # renamed: the code says fx_ok
        "from transformers.utils.import_utils import is_torch_fx_available",  # another module
        "from .utils import is_torch_fx_available",  # the model's own package
        "from mypackage.utils import is_torch_fx_available",  # not transformers
    ],
)
def test_drop_import_leaves_other_imports(line):
    source = f"{line}\n\n\nclass A:\n    pass\n"
    new, applied, _ = run(source, FX)
    assert applied == {} and new == source


def test_drop_import_without_names_drops_every_vendored_name_of_the_module():
    rule = make_rule(
        "drop_import",
        {"module": "utils.model_parallel_utils"},
        helpers=("model_parallel:assert_device_map", "model_parallel:get_device_map"),
    )
    source = "from transformers.utils.model_parallel_utils import assert_device_map, get_device_map\n\n\nclass A:\n    pass\n"
    new, applied, _ = run(source, rule)
    assert applied == {"CM990": 2}
    assert "import" not in new
    assert new.count("def assert_device_map(") == 1 and new.count("def get_device_map(") == 1


def test_drop_import_vendors_only_what_it_dropped():
    rule = make_rule(
        "drop_import",
        {"module": "utils.model_parallel_utils"},
        helpers=("model_parallel:assert_device_map", "model_parallel:get_device_map"),
    )
    source = "from transformers.utils.model_parallel_utils import get_device_map\n\n\nclass A:\n    pass\n"
    new, _, _ = run(source, rule)
    assert "def get_device_map(" in new and "assert_device_map" not in new


def test_drop_import_needs_helpers():
    with pytest.raises(RuleError, match="helpers"):
        make_rule("drop_import", {"module": "utils", "names": ["is_torch_fx_available"]})


# ------------------------------------------------------------------------------------------------------------------
# replace_class_statements
# ------------------------------------------------------------------------------------------------------------------

FIELD = make_rule(
    "replace_class_statements",
    {
        "bases": ["ModelOutput"],
        "pattern": "past_key_values: {annotation} = None",
        "replacement": "if FLAG:\n    cache: {annotation} = None\nelse:\n    past_key_values: {annotation} = None\n",
    },
)


def test_replace_class_statements_rewrites_the_field_of_classes_deriving_from_the_base():
    source = d("""\
        class Out(ModelOutput):
            logits: object = None
            # the cache
            past_key_values: Optional[tuple] = None

            def f(self):
                past_key_values: Optional[tuple] = None
                return past_key_values


        class Other(utils.ModelOutput):
            past_key_values: int = None
        """)
    new, applied, diagnostics = run(source, FIELD)
    assert diagnostics == [] and applied == {"CM990": 2}
    assert new == source.replace(
        "    # the cache\n    past_key_values: Optional[tuple] = None\n",
        "    # the cache\n    if FLAG:\n        cache: Optional[tuple] = None\n    else:\n"
        "        past_key_values: Optional[tuple] = None\n",
    ).replace(
        "    past_key_values: int = None\n",
        "    if FLAG:\n        cache: int = None\n    else:\n        past_key_values: int = None\n",
    )


@pytest.mark.parametrize(
    "source",
    [
        "class Out(object):\n    past_key_values: tuple = None\n",  # not a ModelOutput
        "class Out(ModelOutput):\n    past_key_values: tuple = ()\n",  # another default
        "class Out(metaclass=ModelOutput):\n    past_key_values: tuple = None\n",  # a keyword, not a base
    ],
)
def test_replace_class_statements_leaves_other_classes_and_fields(source):
    new, applied, _ = run(source, FIELD)
    assert applied == {} and new == source


# ------------------------------------------------------------------------------------------------------------------
# tie_weights_mapping
# ------------------------------------------------------------------------------------------------------------------

TIE = make_rule("tie_weights_mapping", {})
HEAD = """\
from torch import nn


class P(PreTrainedModel):
    base_model_prefix = "backbone"


class M(P):
    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(3, 4)

    def get_input_embeddings(self):
        return self.embed


class Head(P):
    _tied_weights_keys = #KEYS#

    def __init__(self, config):
        super().__init__(config)
        self.backbone = M(config)
        self.out = nn.Linear(4, 3)

    def get_output_embeddings(self):
        return self.out
"""


def test_tie_weights_mapping_maps_the_output_embedding_to_the_input_one():
    source = HEAD.replace("#KEYS#", '["out.weight"]')
    new, applied, diagnostics = run(source, TIE)
    assert diagnostics == [] and applied == {"CM990": 1}
    assert new == source.replace('["out.weight"]', '{"out.weight": "backbone.embed.weight"}')


def test_tie_weights_mapping_leaves_a_mapping_alone():
    source = HEAD.replace("#KEYS#", '{"out.weight": "backbone.embed.weight"}')
    new, applied, diagnostics = run(source, TIE)
    assert applied == {} and new == source and diagnostics == []


@pytest.mark.parametrize(
    "edit",
    [
        ('["out.weight"]', '["other.weight"]'),  # not the output embedding
        ("        return self.embed\n", "        return None\n"),  # the input embedding is not found
        ('    base_model_prefix = "backbone"\n', "    pass\n"),  # no prefix: the base model is not found
    ],
)
def test_tie_weights_mapping_reports_what_it_cannot_map_and_changes_nothing(edit):
    source = HEAD.replace("#KEYS#", '["out.weight"]').replace(*edit)
    new, applied, diagnostics = run(source, TIE)
    assert new == source and applied == {}
    assert len(diagnostics) == 1 and "`Head._tied_weights_keys` is a list" in diagnostics[0]
    lines = source.splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text.startswith("    _tied_weights_keys = "))
    key = lines[line - 1].split('"')[1]
    column = lines[line - 1].index('"') + 1  # at the entry whose source is not proven
    assert diagnostics[0].startswith(f"inline.py:{line}:{column}: ")
    assert f"its entry `{key}` is tied to could not be proven" in diagnostics[0]
    assert f'Write the mapping by hand: `_tied_weights_keys = {{"{key}": ' in diagnostics[0]


# ------------------------------------------------------------------------------------------------------------------
# add_method with if_used
# ------------------------------------------------------------------------------------------------------------------

ADD = make_rule(
    "add_method", {"if_used": ["helper_mask"], "template": "def helper_mask(self, x):\n    return x\n"}, role="any"
)


def test_add_method_if_used_adds_the_method_where_the_name_is_used():
    source = "class A:\n    def f(self, x):\n        return self.helper_mask(x)\n"
    new, applied, _ = run(source, ADD)
    assert applied == {"CM990": 1}
    assert new == source + "\n    def helper_mask(self, x):\n        return x\n"


@pytest.mark.parametrize(
    "source",
    [
        "class A:\n    def f(self, x):\n        return helper_mask(x)\n",  # a plain name, not an attribute
        "class A:\n    def f(self, x):\n        return self.other(x)\n",  # not used at all
        "class A:\n    def helper_mask(self, x):\n        return 1\n\n    def f(self, x):\n        return self.helper_mask(x)\n",
    ],
)
def test_add_method_if_used_adds_nothing_where_unused_or_defined(source):
    new, applied, _ = run(source, ADD)
    assert applied == {} and new == source


# ------------------------------------------------------------------------------------------------------------------
# insert_statements with with_parameters
# ------------------------------------------------------------------------------------------------------------------

RESET = make_rule(
    "insert_statements",
    {"anchor": "function_start", "with_parameters": ["position_ids"], "template": "position_ids = None\n"},
    functions=["prepare"],
)


@pytest.mark.parametrize(
    "signature", ["self, ids, position_ids=None", "self, ids, *, position_ids=None", "self, ids, *position_ids"]
)
def test_insert_with_parameters_inserts_where_the_function_takes_them(signature):
    source = f'class A:\n    def prepare({signature}):\n        """Doc."""\n        return ids\n'
    new, applied, _ = run(source, RESET)
    assert applied == {"CM990": 1}
    assert new == source.replace('"""Doc."""\n', '"""Doc."""\n        position_ids = None\n')


@pytest.mark.parametrize(
    "source",
    [
        # a local of that name is no parameter
        "class A:\n    def prepare(self, ids, **kwargs):\n        position_ids = kwargs.get('position_ids')\n"
        "        return position_ids\n",
        "class A:\n    def prepare(self, ids):\n        return ids\n",
    ],
)
def test_insert_with_parameters_leaves_functions_without_them(source):
    new, applied, _ = run(source, RESET)
    assert applied == {} and new == source
