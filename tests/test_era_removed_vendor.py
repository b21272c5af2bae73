"""What an era's runtime removed (cachemigrate/rules/removed.py, CM908; rules that write a removed name are rejected at
load) and the vendored helpers (cachemigrate/rules/vendor.py: inserted once, with what they use; a file's own
definition wins)."""

import shutil
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.facts.analysis import Locator, analyze
from cachemigrate.engine import Options, apply_rules, migrate_source
from cachemigrate.rules.removed import imported, removed_uses
from cachemigrate.rules.loader import RuleError, load_ruleset
from cachemigrate.rules.vendor import closure, helper_imports

REPO = Path(__file__).resolve().parent.parent
FIVE = load_ruleset("5")
OPTIONS = Options(line_length=119)


def d(code: str) -> str:
    return textwrap.dedent(code)


def cm908(code: str, era=FIVE.era) -> list[str]:
    module = cst.parse_module(code)
    return [str(x) for x in removed_uses(module, module, era, "m.py", Locator(module))]


# ------------------------------------------------------------------------------------------------------------------
# removed.py
# ------------------------------------------------------------------------------------------------------------------


def test_imported_reads_relative_and_absolute_transformers_imports_only():
    module = cst.parse_module(d("""\
            import torch
            import transformers.modeling_attn_mask_utils
            from transformers.utils import logging, is_torch_fx_available
            from ...modeling_utils import SequenceSummary
            from .configuration_x import XConfig
            from transformers.masking_utils import *
            """))
    assert [(source, name) for source, name, _ in imported(module)] == [
        ("modeling_attn_mask_utils", ""),
        ("utils", "logging"),
        ("utils", "is_torch_fx_available"),
        ("modeling_utils", "SequenceSummary"),
        ("masking_utils", "*"),
    ]


def test_cm908_names_file_line_and_column_of_a_removed_import():
    code = "import torch\n\nfrom transformers.modeling_attn_mask_utils import _prepare_4d_attention_mask\n"
    (message,) = cm908(code)
    assert message.startswith("m.py:3:1: CM908 the file imports `modeling_attn_mask_utils._prepare_4d_attention_mask`")
    assert "transformers >=5.0 (era 5)" in message and "left unchanged" in message


@pytest.mark.parametrize(
    "line, what",
    [
        ("from ...modeling_utils import PreTrainedModel, SequenceSummary", "`modeling_utils.SequenceSummary`"),
        ("import transformers.utils.model_parallel_utils", "the module `utils.model_parallel_utils`"),
        ("from transformers.modeling_attn_mask_utils.sub import f", "`modeling_attn_mask_utils.sub.f`"),
    ],
)
def test_cm908_for_modules_names_and_submodules_the_era_removed(line, what):
    (message,) = cm908(f"x = 1\n{line}\n")
    assert message.startswith(f"m.py:2:1: CM908 the file imports {what}")


@pytest.mark.parametrize(
    "line",
    [
        "from transformers.modeling_utils import PreTrainedModel",  # the module stays, only one name went
        "from transformers.modeling_attn_mask_utils_extra import f",  # a module whose name only starts the same
        "from .modeling_attn_mask_utils import f",  # the model's own package
        "from transformers.utils import logging",
    ],
)
def test_no_cm908_for_what_the_runtime_still_has(line):
    assert cm908(line + "\n") == []


def test_cm908_for_a_removed_method_called_and_not_defined_once_at_its_first_call():
    code = d("""\
        class M:
            def forward(self, mask):
                a = self.get_extended_attention_mask(mask, (1, 2))
                b = self.get_extended_attention_mask(mask, (1, 2))
                return self.get_head_mask(None, 2)
        """)
    messages = cm908(code)
    assert len(messages) == 2
    assert messages[0].startswith("m.py:3:13: CM908 `self.get_extended_attention_mask(...)`")
    assert messages[1].startswith("m.py:5:16: CM908 `self.get_head_mask(...)`")
    defined = code + "\n    def get_head_mask(self, mask, n):\n        return [None] * n\n"
    assert [m.split(" CM908 ")[1].split("`")[1] for m in cm908(defined)] == ["self.get_extended_attention_mask(...)"]


def test_era_452_removes_nothing():
    era = load_ruleset("4.52").era
    assert cm908("from transformers.modeling_attn_mask_utils import f\n", era) == []


def test_a_migrated_file_that_still_imports_a_removed_helper_is_left_unchanged_with_cm908():
    """The full model fixture, with an import of a mask helper no rule of era 5 vendors."""
    code = (REPO / "fixtures" / "4.52" / "full" / "before.py").read_text()
    line = "from transformers.modeling_attn_mask_utils import _ignore_causal_mask_sdpa\n"
    edited = code.replace("import torch\n", "import torch\n" + line, 1)
    assert edited != code
    result = migrate_source(edited, FIVE, OPTIONS, path="edited.py")
    assert result.status == "failed" and result.migrated == edited
    number = edited.splitlines().index(line.rstrip()) + 1
    # the import is the only reason: every rule applied, and nothing else is reported
    assert [str(x).split(" the file")[0] for x in result.diagnostics] == [f"edited.py:{number}:1: CM908"]
    assert {"CM010", "CM018", "CM405"} <= set(result.applied)


def _rules_copy(tmp_path: Path) -> Path:
    root = tmp_path / "rules"
    shutil.copytree(REPO / "rules", root)
    return root


def test_a_rule_that_writes_a_removed_name_is_a_rule_error_at_load(tmp_path):
    rule = (REPO / "rules" / "5" / "CM018.toml").read_text()
    # the filter that reads `to_legacy_cache()` in place of the one that reads `cache.layers`
    bad = rule.replace("{presents|layers_to_legacy}", "{presents|cache_to_legacy}")
    assert bad != rule
    (tmp_path / "CM018.toml").write_text(bad)
    with pytest.raises(RuleError) as error:
        load_ruleset("5", (tmp_path,))
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'CM018.toml'}: rule CM018 (return-legacy-cache) of era 5 writes")
    assert "`to_legacy_cache`" in message and "transformers >=5.0" in message


def test_an_inherited_rule_that_writes_a_removed_name_is_a_rule_error_naming_the_fix(tmp_path):
    """Without its era-5 override, CM018 of 4.52 (`to_legacy_cache()`) reaches era 5."""
    root = _rules_copy(tmp_path)
    (root / "5" / "CM018.toml").unlink()
    with pytest.raises(RuleError) as error:
        load_ruleset("5", root=root)
    message = str(error.value)
    assert message.startswith(str(root / "4.52" / "CM018.toml"))
    assert "`to_legacy_cache`" in message and "rules/5/CM018.toml" in message and "`remove`" in message


def test_what_a_rule_matches_may_name_a_removed_name(tmp_path):
    """Only what a rule writes counts: a pattern that finds `to_legacy_cache()` (to replace it) is allowed."""
    rule = d("""\
        id = "CM995"
        name = "drop-converter"
        description = "A converter call read from the layers"
        era = "5"
        tier = "dynamic"
        role = "base_model"
        action = "replace_expression"

        [params]
        pattern = "{cache}.to_legacy_cache()"
        replacement = "tuple((layer.keys, layer.values) for layer in {cache}.layers)"
        """)
    (tmp_path / "CM995.toml").write_text(rule)
    assert "CM995" in {r.id for r in load_ruleset("5", (tmp_path,)).rules}
    (tmp_path / "CM995.toml").write_text(rule.replace("{cache}.layers)", "{cache}.to_legacy_cache())"))
    with pytest.raises(RuleError, match="CM995 .* writes `to_legacy_cache`"):
        load_ruleset("5", (tmp_path,))


# ------------------------------------------------------------------------------------------------------------------
# vendor.py
# ------------------------------------------------------------------------------------------------------------------


def run(code: str, era: str, *rule_ids: str):
    rules = load_ruleset(era)
    chosen = [r for r in rules.rules if r.id in rule_ids]
    module = cst.parse_module(code)
    info = analyze(module, rules.era.cache_names)
    new, applied, diagnostics = apply_rules(module, info, chosen, rules.era, "v.py", OPTIONS)
    return new.code, applied, [str(x) for x in diagnostics]


def test_closure_brings_the_definitions_a_helper_uses_in_the_vendor_files_order():
    names = [name for name, _ in closure([("attn_mask:_prepare_4d_causal_attention_mask", None)])]
    assert names == ["_mask_tracing", "AttentionMaskConverter", "_prepare_4d_causal_attention_mask"]


def test_a_helper_two_rules_need_is_inserted_once_with_what_it_uses():
    code = d("""\
        import torch
        from torch import nn


        class Rotary(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.config = config
                self.theta = config.rope_theta

            def again(self):
                return self.config.rope_theta
        """)
    new, applied, diagnostics = run(code, "5", "CM410", "CM411")
    assert diagnostics == [] and applied == {"CM410": 1, "CM411": 1}
    assert new.count("def legacy_rope_theta(config):") == 1
    assert new.index("def legacy_rope_theta") < new.index("class Rotary")
    assert "legacy_rope_theta(config)" in new and "legacy_rope_theta(self.config)" in new


def test_a_file_that_defines_the_helper_keeps_its_own():
    code = d("""\
        import torch
        from torch import nn


        def legacy_rope_theta(config):
            return 10000.0


        class Rotary(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.theta = config.rope_theta
        """)
    new, applied, _ = run(code, "5", "CM410")
    assert applied == {"CM410": 1}
    assert new == code.replace("config.rope_theta", "legacy_rope_theta(config)")


def test_vendored_helpers_go_before_a_module_level_statement_that_uses_them():
    code = d("""\
        import torch
        from torch import nn
        from transformers.utils.import_utils import is_torch_fx_available

        FX = is_torch_fx_available()


        class A(nn.Module):
            pass
        """)
    new, _, _ = run(code, "5", "CM433")
    assert new.index("def is_torch_fx_available") < new.index("FX = is_torch_fx_available()")


@pytest.mark.parametrize(
    "head, expected",
    [
        ("from torch import nn\n", ["activations:ACT2FN", "import torch"]),
        ("import torch\n", ["activations:ACT2FN"]),
        ("import torch.nn\n", ["activations:ACT2FN"]),  # binds `torch`
        ("import torch as th\n", ["activations:ACT2FN", "import torch"]),
        # the vendor file's `from transformers.activations import ACT2FN`: not again where the file binds the name
        ("import torch\nfrom ...activations import ACT2FN\n", []),
    ],
)
def test_vendored_helpers_bring_the_imports_they_read(head, expected):
    module = cst.parse_module(head + "\n\nclass A:\n    pass\n")
    assert helper_imports(module, [("sequence_summary:SequenceSummary", None)]) == expected


def test_a_file_with_only_from_torch_import_nn_gets_import_torch_for_a_vendored_class():
    code = d("""\
        from torch import nn
        from transformers.modeling_utils import SequenceSummary


        class Head(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.summary = SequenceSummary(config)
        """)
    new, applied, _ = run(code, "4.56", "CM402")
    assert applied == {"CM402": 1}
    compile(new, "v.py", "exec")
    assert new.count("import torch\n") == 1 and "from transformers.activations import ACT2FN" in new
    assert new.index("import torch\n") < new.index("class SequenceSummary(torch.nn.Module):")


def test_a_rule_naming_a_helper_no_vendor_file_defines_is_a_rule_error(tmp_path):
    rule = (REPO / "rules" / "5" / "CM433.toml").read_text().replace("compat:is_torch_fx_available", "compat:nope")
    (tmp_path / "CM433.toml").write_text(rule)
    with pytest.raises(RuleError, match="`helpers`.*compat.py defines"):
        load_ruleset("5", (tmp_path,))
