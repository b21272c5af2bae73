"""Patches of library classes (cachemigrate/facts/patches.py, rules CM620-CM628): a module-level function set on a
transformers attention is migrated to the contract of each era's releases.

In process, on transformers 4.51.3: the migrated function, handed a DynamicCache, computes bit for bit what the
original computes on the (key, value) tuple of the same tensors, and leaves in the cache what the original returned
as its present. The library model running each patch on its own runtime is tests/test_patches_runtimes.py's.
"""

import types
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.facts.analysis import analyze
from cachemigrate.facts.patches import find_patches
from cachemigrate.rules.loader import load_ruleset

REPO = Path(__file__).resolve().parent.parent
GPT2_FORWARD = REPO / "fixtures" / "patches" / "gpt2_forward"
PATCH = GPT2_FORWARD / "streaming_attention.py"
SUBCLASS = REPO / "fixtures" / "patches" / "attention_subclass" / "recency_attention.py"
LLAMA = REPO / "fixtures" / "patches" / "llama_forward" / "capped_attention.py"
ASSIGNED = REPO / "fixtures" / "patches" / "class_assignment" / "tempered_attention.py"
# the `layer_past` contract: a function set on the class, a subclass swapped into the blocks, a subclass set in the
# library module in place of the class
FIXTURES = {"gpt2_forward": PATCH, "attention_subclass": SUBCLASS, "class_assignment": ASSIGNED}
REVIEWED = {**FIXTURES, "llama_forward": LLAMA}
ERAS = ("4.56", "5", "portable")
OPTIONS = Options(line_length=119)


def _migrate(code: str, era: str, path: str = "patch.py"):
    return migrate_source(code, load_ruleset(era), OPTIONS, path=path)


@pytest.mark.parametrize("fixture", sorted(REVIEWED))
@pytest.mark.parametrize("era", ERAS)
def test_each_patch_migrates_for_each_era_to_the_reviewed_output(era, fixture):
    path = REVIEWED[fixture]
    result = _migrate(path.read_text(), era, str(path))
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    expected = path.parent / "migrated" / f"era_{era.replace('.', '_')}.py"
    assert result.migrated == expected.read_text()
    assert _migrate(result.migrated, era).status == "clean"  # nothing left to migrate


def test_the_patch_target_is_read_off_the_import():
    module = cst.parse_module(PATCH.read_text())
    info = analyze(module, load_ruleset("4.56").era.cache_names)
    [patch] = find_patches(module, info.functions)
    assert (patch.function, patch.cls, patch.library, patch.role) == (
        "streaming_attention_forward",
        "GPT2Attention",
        "transformers.models.gpt2.modeling_gpt2",
        "attention",
    )
    assert info.roles["patch"] == ["streaming_attention_forward"] and info.roles["consumer"] == []


def test_a_subclass_of_a_library_attention_is_a_patch_where_the_file_stacks_no_layers():
    module = cst.parse_module(SUBCLASS.read_text())
    info = analyze(module, load_ruleset("4.56").era.cache_names)
    assert info.roles["patch"] == ["RecencyBiasedAttention.forward"] and info.roles["attention"] == []


def test_the_same_function_set_on_a_class_of_the_file_is_no_patch():
    code = PATCH.read_text().replace(
        "from transformers.models.gpt2.modeling_gpt2 import GPT2Attention\n", "\n\nclass GPT2Attention:\n    pass\n"
    )
    result = _migrate(code, "4.56")
    assert result.status == "failed" and result.migrated == code
    [diagnostic] = result.diagnostics
    assignment = code.splitlines().index("GPT2Attention.forward = streaming_attention_forward") + 1
    assert (diagnostic.code, diagnostic.line) == ("CM916", assignment)
    assert "`GPT2Attention` is not imported from transformers" in diagnostic.message


def test_a_patch_of_a_library_model_is_refused_saying_only_attentions_are_patch_targets():
    code = PATCH.read_text().replace("GPT2Attention", "GPT2Model")
    result = _migrate(code, "5")
    [diagnostic] = result.diagnostics
    assignment = code.splitlines().index("GPT2Model.forward = streaming_attention_forward") + 1
    assert (result.status, diagnostic.code, diagnostic.line) == ("failed", "CM916", assignment)
    assert "(`transformers.models.gpt2.modeling_gpt2.GPT2Model`) that is not an attention" in diagnostic.message


def _load(code: str, name: str):
    module = types.ModuleType(name)
    exec(compile(code, name, "exec"), module.__dict__)
    return module


# the attention class each fixture's forward runs in, built from the loaded module
ATTENTIONS = {
    "gpt2_forward": lambda module, library: library,
    "attention_subclass": lambda module, library: module.RecencyBiasedAttention,
    "class_assignment": lambda module, library: module.TemperedAttention,
}


def _attentions(fixture: str, code: str, name: str, config):
    """The attention module of the fixture's code, with layer index 1, its forward the patch's."""
    import torch
    from transformers.models.gpt2 import modeling_gpt2

    library, forward = modeling_gpt2.GPT2Attention, modeling_gpt2.GPT2Attention.forward
    try:  # a module patches the class, or replaces it, as it is loaded: both are restored, the function is bound
        module = _load(code, name)
    finally:
        modeling_gpt2.GPT2Attention, library.forward = library, forward
    torch.manual_seed(0)  # the same weights in every module built
    attention = ATTENTIONS[fixture](module, library)(config, layer_idx=1).eval()
    if fixture == "gpt2_forward":
        return types.MethodType(module.streaming_attention_forward, attention)
    return attention


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
@pytest.mark.parametrize("era", ERAS)
def test_the_migrated_attention_on_a_cache_computes_what_the_original_computes_on_the_tuple(era, fixture):
    import torch
    from transformers import DynamicCache, GPT2Config

    code = FIXTURES[fixture].read_text()
    config = GPT2Config(n_embd=32, n_head=4, n_layer=2, attn_pdrop=0.0, resid_pdrop=0.0)
    original = _attentions(fixture, code, "original_patch", config)
    migrated = _attentions(fixture, _migrate(code, era).migrated, "migrated_patch", config)
    past_key, past_value = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8)
    hidden = torch.randn(2, 3, 32)
    cache = DynamicCache()
    cache.update(torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 8), 0)  # layer 0: another layer's past
    cache.update(past_key.clone(), past_value.clone(), 1)
    with torch.no_grad():
        first = original(hidden, layer_past=(past_key, past_value), use_cache=True, output_attentions=True)
        keyword = {"cache": cache} if era != "4.56" else {"past_key_values": cache}  # 5.24+: `cache=`
        got, got_weights = migrated(hidden, use_cache=True, output_attentions=True, **keyword)
        again, second = migrated(hidden[:, :1], use_cache=True, **keyword)
        expected, next_present = original(hidden[:, :1], layer_past=first[1], use_cache=True)[:2]
    assert torch.equal(got, first[0])
    assert torch.equal(got_weights, first[2]) if len(first) == 3 else got_weights is None  # weights when returned
    assert torch.equal(again, expected) and not isinstance(second, tuple)  # weights (or None), never a present
    assert torch.equal(cache.key_cache[1], next_present[0]) and torch.equal(cache.value_cache[1], next_present[1])
    assert cache.get_seq_length(1) == 9 and cache.get_seq_length(0) == 5  # only its own layer grew


def test_the_portable_patch_refuses_a_release_that_still_passes_the_tuple():
    import torch
    from transformers import GPT2Config
    from transformers.models.gpt2.modeling_gpt2 import GPT2Attention

    forward = GPT2Attention.forward
    try:
        migrated = _load(_migrate(PATCH.read_text(), "portable").migrated, "portable_patch")
    finally:
        GPT2Attention.forward = forward
    attention = GPT2Attention(GPT2Config(n_embd=32, n_head=4), layer_idx=0)
    past = (torch.zeros(1, 4, 2, 8), torch.zeros(1, 4, 2, 8))
    with pytest.raises(TypeError, match="this release passes `layer_past`"):
        migrated.streaming_attention_forward(attention, torch.zeros(1, 1, 32), layer_past=past, use_cache=True)


def test_a_patch_on_the_cache_api_is_left_for_era_452_and_is_clean_once_migrated():
    code = LLAMA.read_text()
    assert _migrate(code, "4.52").status == "clean"  # 4.42-4.53 pass the Cache as `past_key_value`: as written
    migrated = _migrate(code, "4.56").migrated
    assert "past_key_value=" not in migrated and _migrate(migrated, "4.56").status == "clean"
    assert _migrate(migrated, "5").status == "migrated"  # 5.24+ pass it as `cache`: era 5 has more to say


def test_a_patch_using_its_cache_as_a_tuple_under_a_keyword_no_release_passed_it_names_the_keyword():
    code = PATCH.read_text().replace("layer_past", "past")
    result = _migrate(code, "4.56")
    [diagnostic] = result.diagnostics
    assignment = code.splitlines().index("GPT2Attention.forward = streaming_attention_forward") + 1
    assert (result.status, diagnostic.code, diagnostic.line) == ("failed", "CM916", assignment)
    assert "takes its cache as `past` used as a tuple" in diagnostic.message


def test_a_present_returned_in_a_form_no_rule_rewrites_is_refused_at_the_patch_not_as_an_internal_error():
    code = PATCH.read_text()
    tail = "    outputs = (attn_output, present)\n    if output_attentions:\n        outputs += (weights,)\n    return outputs\n"
    code = code.replace(tail, '    return {"output": attn_output, "present": present}\n')
    result = _migrate(code, "4.56")
    [diagnostic] = result.diagnostics
    assert (result.status, diagnostic.code, diagnostic.line) == ("failed", "CM916", 12)  # the patch's `def`
    assert "it still reads `present`, the present of the `layer_past` contract" in diagnostic.message


def test_the_probe_finds_the_library_model_of_each_patch_and_the_function_that_swaps_a_subclass_in():
    from cachemigrate.probe.patch_cross import patch_target

    assert patch_target(PATCH) == ("transformers.models.gpt2.modeling_gpt2", None)
    assert patch_target(SUBCLASS) == ("transformers.models.gpt2.modeling_gpt2", "use_recency_bias")
    assert patch_target(LLAMA) == ("transformers.models.llama.modeling_llama", None)
    assert patch_target(ASSIGNED) == ("transformers.models.gpt2.modeling_gpt2", None)  # importing it sets the class
    assert patch_target(REPO / "fixtures" / "4.52" / "full" / "before.py") is None  # a model file: the usual probe


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_a_patch_of_the_tuple_contract_is_refused_for_era_452_at_its_def(fixture):
    code = FIXTURES[fixture].read_text()
    result = _migrate(code, "4.52")
    [diagnostic] = result.diagnostics
    line = next(
        i for i, text in enumerate(code.splitlines(), 1) if text.lstrip().startswith("def ") and "orward" in text
    )
    assert (result.status, result.migrated, diagnostic.code, diagnostic.line) == ("failed", code, "CM627", line)
    assert (
        "takes `layer_past`" in diagnostic.message
        and "migrate it with --era 4.56, 5 or portable" in diagnostic.message
    )


@pytest.mark.parametrize(
    "imports, target",
    [
        ("import transformers.models.gpt2.modeling_gpt2 as mg", "mg.GPT2Attention"),
        ("import transformers.models.gpt2.modeling_gpt2", "transformers.models.gpt2.modeling_gpt2.GPT2Attention"),
        ("from transformers.models.gpt2.modeling_gpt2 import GPT2Attention as Base", "Base"),
    ],
)
def test_the_target_class_is_resolved_through_each_spelling_of_its_import(imports, target):
    code = PATCH.read_text().replace("from transformers.models.gpt2.modeling_gpt2 import GPT2Attention", imports)
    code = code.replace("GPT2Attention.forward = ", f"{target}.forward = ")
    module = cst.parse_module(code)
    [patch] = find_patches(module, analyze(module, load_ruleset("4.56").era.cache_names).functions)
    assert (patch.library, patch.cls, patch.role) == (
        "transformers.models.gpt2.modeling_gpt2",
        "GPT2Attention",
        "attention",
    )
    assert _migrate(code, "4.56").status == "migrated"
