"""Older spellings of the idioms the rules migrate (transformers 4.6 to 4.35, where remote code was copied from),
read as the newer ones. Each has a fixture of its own under ``fixtures/older/`` (written for this repo in the older
style): it migrates in every era, and the migrated model gives the original's tensors bit for bit on the installed
runtime, a tuple in giving a tuple back.

- ``loopswitch``: the gradient-checkpointing switch (``if use_cache: ... use_cache = False``) written inside the
  loop over the blocks, at the top of the checkpointed branch (``facts/caching_switch.py``); the cache set-up takes
  it above the loop.
- ``assertlen``: a check of the layer past written as an assertion (``assert len(layer_past) == 2, ...``), read as
  ``if len(layer_past) != 2: raise ...`` through the negation of its test (``views/negation.py``)."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.facts.caching_switch import loop_switch
from cachemigrate.rules.loader import load_ruleset
from cachemigrate.views.negation import negated

OLDER = Path(__file__).resolve().parent.parent / "fixtures" / "older"
ERAS = ("4.52", "4.56", "5", "portable")


@functools.cache
def ruleset(era: str):
    return load_ruleset(era)


def migrate(code: str, era: str, path: Path):
    return migrate_source(code, ruleset(era), Options(line_length=119), path=str(path))


def _line(code: str, text: str) -> int:
    [line] = [n for n, line in enumerate(code.splitlines(), 1) if text in line]
    return line


def _pair(tmp_path, folder: Path, modeling: Path, code: str, era: str, head: str, config: str):
    """The original and the migrated head (same weights), each loaded from a folder of its own."""
    import torch

    from cachemigrate.probe import unload_module
    from cachemigrate.probe.loading import load_modeling_module

    migrated = tmp_path / folder.name
    shutil.copytree(folder, migrated)
    result = migrate(code, era, modeling)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    (migrated / modeling.name).write_text(result.migrated)
    pair = []
    for where in (folder, migrated):
        module = load_modeling_module(where / modeling.name)
        try:
            torch.manual_seed(0)
            pair.append(getattr(module, head)(getattr(module, config)()).eval())
        finally:
            unload_module(module)
    pair[1].load_state_dict(pair[0].state_dict())
    return pair


# -- loopswitch: the gradient-checkpointing switch inside the loop over the blocks --------------------------------

LOOPSWITCH = OLDER / "loopswitch"
LOOPSWITCH_FILE = LOOPSWITCH / "modeling_loopswitch.py"
SWITCH = """\
                if use_cache:
                    logger.warning(
                        "`use_cache=True` is incompatible with `config.gradient_checkpointing=True`. Setting "
                        "`use_cache=False`..."
                    )
                    use_cache = False
"""


def _stack_loop(code: str) -> cst.For:
    module = cst.parse_module(code)
    [stack] = [s for s in module.body if isinstance(s, cst.ClassDef) and s.name.value == "LoopSwitchEncoder"]
    [forward] = [s for s in stack.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "forward"]
    [loop] = [s for s in forward.body.body if isinstance(s, cst.For)]
    return loop


def test_the_switch_inside_the_loop_is_found_as_the_older_spelling():
    found = loop_switch(_stack_loop(LOOPSWITCH_FILE.read_text()), "use_cache")
    assert found is not None
    assert cst.Module([]).code_for_node(found.branch.test) == (
        'getattr(self.config, "gradient_checkpointing", False) and self.training'
    )
    assert cst.Module([]).code_for_node(found.switch).strip() == SWITCH.strip().replace("\n" + " " * 16, "\n")


@pytest.mark.parametrize(
    "change",
    [
        # the test reads something the loop binds: not the same on every pass
        ('getattr(self.config, "gradient_checkpointing", False) and self.training:', "i > 0 and self.training:"),
        # the loop body reads the flag before the switch
        ("past_key_value = past_key_values[i] if", "past_key_value = past_key_values[i] if use_cache and"),
        # the switch does more than warn and turn caching off
        ("                    use_cache = False\n", "                    use_cache = False\n                    i = 0\n"),
        # the loop assigns the flag once more
        ("            hidden_states = layer_outputs[0]\n", ("            hidden_states = layer_outputs[0]\n"
         "            use_cache = use_cache and hidden_states is not None\n")),
    ],
)  # fmt: skip
def test_a_switch_that_is_not_the_same_idiom_is_not_taken_for_it(change):
    code = LOOPSWITCH_FILE.read_text()
    assert change[0] in code
    assert loop_switch(_stack_loop(code.replace(change[0], change[1], 1)), "use_cache") is None


@pytest.mark.parametrize("era", ERAS)
def test_the_switch_goes_above_the_cache_set_up_in_every_era(era):
    code = LOOPSWITCH_FILE.read_text()
    result = migrate(code, era, LOOPSWITCH_FILE)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    assert "CM210" in result.applied
    new = result.migrated
    stack = new[new.index("class LoopSwitchEncoder") : new.index("class LoopSwitchPreTrainedModel")]
    switch = SWITCH.replace("\n" + " " * 4, "\n")[4:]  # one level up: the function body, not the loop's branch
    assert stack.count("use_cache = False") == 1 and switch in stack
    test = '        if getattr(self.config, "gradient_checkpointing", False) and self.training:\n'
    assert stack.index(test + switch) < stack.index("return_legacy_cache = False") < stack.index("for i, layer")
    # in the loop the checkpointed branch keeps its test and the rest of its body, as 4.27 wrote it
    loop = stack[stack.index("for i, layer") :]
    assert '    if getattr(self.config, "gradient_checkpointing", False) and self.training:\n\n' in loop
    assert "if use_cache:" not in loop
    # nothing outside the claims changed: the original's lines around the moved switch are kept byte for byte
    assert migrate(new, era, LOOPSWITCH_FILE).status == "clean"


def test_a_statement_that_reads_the_flag_between_the_set_up_and_the_loop_keeps_the_file_refused():
    anchor = "        for i, layer_module in enumerate(self.layer):\n"
    code = LOOPSWITCH_FILE.read_text().replace(anchor, "        caching = use_cache\n" + anchor)
    result = migrate(code, "4.52", LOOPSWITCH_FILE)
    assert result.status == "failed" and result.migrated == code
    [refusal] = [d for d in result.diagnostics if d.code == "CM210"]
    assert refusal.line == _line(code, "                    use_cache = False")
    assert "inside the loop over the blocks, after line " in refusal.message
    assert f"line {_line(code, 'caching = use_cache')}, which reads `use_cache`" in refusal.message


@pytest.mark.parametrize("era", ["4.52", "portable"])
def test_the_migrated_decoder_gives_the_original_tensors_bit_for_bit(tmp_path, era):
    torch = pytest.importorskip("torch")
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    code = LOOPSWITCH_FILE.read_text()
    original, new = _pair(
        tmp_path, LOOPSWITCH, LOOPSWITCH_FILE, code, era, "LoopSwitchLMHeadModel", "LoopSwitchConfig"
    )
    generator = torch.Generator().manual_seed(1)
    encoded = torch.randn(2, 5, 16, generator=generator)
    steps = [torch.randint(2, 53, (2, n), generator=generator) for n in (4, 1, 1)]
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    with torch.no_grad():
        old_past = new_past = None
        for step in steps:
            before = original(step, encoder_hidden_states=encoded, past_key_values=old_past, use_cache=True)
            after = new(step, encoder_hidden_states=encoded, past_key_values=new_past, use_cache=True)
            given = new(step, encoder_hidden_states=encoded, past_key_values=cache, use_cache=True)
            assert torch.equal(before.logits, after.logits) and torch.equal(before.logits, given.logits)
            assert isinstance(after.past_key_values, tuple) and given.past_key_values is cache
            for old_layer, new_layer in zip(before.past_key_values, after.past_key_values, strict=True):
                assert len(old_layer) == len(new_layer) == 4
                assert all(torch.equal(a, b) for a, b in zip(old_layer, new_layer))
            old_past, new_past = before.past_key_values, after.past_key_values


def test_checkpointed_training_gives_the_same_gradients_and_makes_no_cache(tmp_path):
    torch = pytest.importorskip("torch")
    code = LOOPSWITCH_FILE.read_text()
    original, new = _pair(
        tmp_path, LOOPSWITCH, LOOPSWITCH_FILE, code, "4.52", "LoopSwitchLMHeadModel", "LoopSwitchConfig"
    )
    ids = torch.randint(2, 53, (2, 6), generator=torch.Generator().manual_seed(2))
    encoded = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(3))
    grads, returned = [], []
    for model in (original, new):
        model.train()
        model.config.gradient_checkpointing = True
        model.zero_grad()
        out = model(ids, encoder_hidden_states=encoded, use_cache=True)
        out.logits.square().mean().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        returned.append(out.past_key_values)
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))
    # caching went off: the original hands back the empty tuple it had started, the migrated file no cache (the
    # switch now comes before the presents start, as in releases from 4.27 on)
    assert returned == [(), None]


def test_a_decoder_only_stack_takes_the_switch_above_its_fresh_cache_and_trains_as_before(tmp_path):
    """The same spelling where the set-up is a fresh cache (CM024, anchored after the last `use_cache`): the
    checkpointed branch hands each block its past, and with the switch above the set-up no cache is made there."""
    torch = pytest.importorskip("torch")
    from conftest import checkpointed_training, load_class
    from transformers import PretrainedConfig

    path = LOOPSWITCH / "decoder_only.py"
    result = migrate(path.read_text(), "4.52", path)
    assert result.status == "migrated" and "CM024" in result.applied, [str(d) for d in result.diagnostics]
    new_code = result.migrated
    switch = "        if self.gradient_checkpointing and self.training:\n            if use_cache:\n"
    assert new_code.index(switch) < new_code.index("past_key_values = DynamicCache()")
    assert new_code.count("use_cache = False") == 1
    migrated = tmp_path / "decoder_only_after.py"
    migrated.write_text(new_code)
    config = PretrainedConfig(vocab_size=11, hidden_size=8, num_layers=2, use_cache=True)
    torch.manual_seed(0)
    old = load_class(path, "WrenModel", "switch_before")(config)
    new = load_class(migrated, "WrenModel", "switch_after")(config)
    new.load_state_dict(old.state_dict())
    ids, step = torch.randint(0, 11, (2, 5)), torch.randint(0, 11, (2, 1))
    with torch.no_grad():
        out, presents = old(ids)
        new_out, new_presents = new(ids)
        assert torch.equal(out, new_out) and isinstance(new_presents, tuple)
        assert all(torch.equal(a, b) for pa, pb in zip(presents, new_presents) for a, b in zip(pa, pb))
        assert torch.equal(old(step, presents)[0], new(step, new_presents)[0])
    grads, returned = checkpointed_training((old, new), ids)
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))
    assert returned == [(), None]  # caching went off: the empty tuple the original had started, no cache now


# -- assertlen: a check of the past written as an assertion -------------------------------------------------------

ASSERTLEN = OLDER / "assertlen"
ASSERTLEN_FILE = ASSERTLEN / "modeling_assertlen.py"


@pytest.mark.parametrize(
    "test, raising",
    [
        ("len(c) == 2", "len(c) != 2"),
        ("(len(c) != 2)", "len(c) == 2"),
        ("x is not None", "x is None"),
        ("k not in d", "k in d"),
        ("not isinstance(c, Cache) and not (len(c) == 2)", "isinstance(c, Cache) or len(c) == 2"),
        ("a or b and c", "not a and (not b or not c)"),
        ("a < b", "not a < b"),  # an order is not flipped (NaN)
        ("a if b else c", "not (a if b else c)"),
    ],
)
def test_the_negation_of_a_test_flips_what_flips_exactly(test, raising):
    assert cst.Module([]).code_for_node(negated(cst.parse_expression(test))) == raising


@pytest.mark.parametrize("era", ERAS)
def test_an_assertion_on_the_past_is_kept_for_tuples_in_every_era(era):
    code = ASSERTLEN_FILE.read_text()
    result = migrate(code, era, ASSERTLEN_FILE)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    assert "CM221" in result.applied
    assert (
        "            assert (\n"
        "                isinstance(layer_past, Cache) or len(layer_past) == 2\n"
        '            ), f"a layer past holds its keys and values, got {len(layer_past)} tensors"\n'
    ) in result.migrated
    again = migrate(result.migrated, era, ASSERTLEN_FILE)
    assert again.status == "clean" and again.migrated == result.migrated


def test_an_assertion_no_rule_reads_stays_refused_at_its_line():
    code = ASSERTLEN_FILE.read_text().replace("len(layer_past) == 2\n", "len(layer_past) in (2, 3)\n")
    result = migrate(code, "4.52", ASSERTLEN_FILE)
    assert result.status == "failed" and result.migrated == code
    [refusal] = [d for d in result.diagnostics if d.code == "CM900"]
    assert refusal.line == _line(code, "len(layer_past) in (2, 3)")
    assert "`len(layer_past)`" in refusal.message


@pytest.mark.parametrize("era", ["4.52", "portable"])
def test_the_migrated_assertion_model_gives_the_original_tensors_bit_for_bit(tmp_path, era):
    torch = pytest.importorskip("torch")
    from transformers.cache_utils import DynamicCache

    code = ASSERTLEN_FILE.read_text()
    original, new = _pair(tmp_path, ASSERTLEN, ASSERTLEN_FILE, code, era, "AssertLenForCausalLM", "AssertLenConfig")
    generator = torch.Generator().manual_seed(4)
    steps = [torch.randint(2, 47, (2, n), generator=generator) for n in (5, 1, 1)]
    cache = DynamicCache()
    with torch.no_grad():
        old_past = new_past = None
        for step in steps:
            before = original(step, past_key_values=old_past, use_cache=True)
            after = new(step, past_key_values=new_past, use_cache=True)
            given = new(step, past_key_values=cache, use_cache=True)
            assert torch.equal(before.logits, after.logits) and torch.equal(before.logits, given.logits)
            assert isinstance(after.past_key_values, tuple) and given.past_key_values is cache
            for old_layer, new_layer in zip(before.past_key_values, after.past_key_values, strict=True):
                assert all(torch.equal(a, b) for a, b in zip(old_layer, new_layer, strict=True))
            old_past, new_past = before.past_key_values, after.past_key_values
        # the assertion still guards a tuple: an attention handed a layer past of three tensors refuses it as before
        hidden, broken = torch.randn(2, 1, 16, generator=generator), (*old_past[0], old_past[0][0])
        for model in (original, new):
            with pytest.raises(AssertionError, match="got 3 tensors"):
                model.transformer.h[0].attn(hidden, layer_past=broken)


# -- a head that cuts its inputs in `forward` when handed a past (4.6's T5 and BART heads) ------------------------


def _with_cut(cut: str) -> tuple[str, int]:
    """The assertlen fixture whose head cuts its inputs in ``forward`` when handed a past, and the test's line."""
    anchor = "        return_dict = return_dict if return_dict is not None else self.config.use_return_dict\n"
    code = ASSERTLEN_FILE.read_text()
    assert code.count(anchor) == 2
    at = code.rindex(anchor) + len(anchor)
    return code[:at] + cut + code[at:], code[:at].count("\n") + 1


def test_a_forward_cut_that_no_rule_rewrites_is_refused_there():
    """``generate()`` hands a migrated model an empty Cache on the first step: a forward that cuts the prompt to its
    last token when a past is present would cut it on the first step too (the probe saw T5 of 4.6.1 do it). CM111
    rewrites the test of a ``x[:, -1:]`` cut; a cut it does not know keeps the file refused at that test."""
    code, line = _with_cut("        if past_key_values is not None:\n            input_ids = input_ids[..., -1:]\n")
    result = migrate(code, "4.52", ASSERTLEN_FILE)
    assert result.status == "failed" and result.migrated == code
    [refusal] = result.diagnostics
    assert (refusal.code, refusal.line) == ("CM900", line)
    assert refusal.message.startswith(
        "AssertLenForCausalLM.forward tells the first generation step by the absence of a past "
        "(`if past_key_values is not None:`)"
    )


@pytest.mark.parametrize("era", ERAS)
def test_a_forward_that_cuts_its_inputs_when_handed_a_past_asks_the_cache_for_a_token(tmp_path, era):
    """CM111: the migrated head keeps the prompt whole on a first step handed an empty Cache, and cuts it to the
    last token once the cache holds one, as the original with None and then with its tuple."""
    torch = pytest.importorskip("torch")
    from transformers.cache_utils import DynamicCache

    code, _ = _with_cut("        if past_key_values is not None:\n            input_ids = input_ids[:, -1:]\n")
    result = migrate(code, era, ASSERTLEN_FILE)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    assert "CM111" in result.applied
    if era != "4.52":  # the runtime here is 4.51.3: the bit-for-bit run below is the 4.52 one
        return
    source = tmp_path / "source" / ASSERTLEN.name
    shutil.copytree(ASSERTLEN, source)
    (source / ASSERTLEN_FILE.name).write_text(code)
    original, new = _pair(
        tmp_path, source, source / ASSERTLEN_FILE.name, code, era, "AssertLenForCausalLM", "AssertLenConfig"
    )
    ids = torch.randint(2, 47, (2, 6), generator=torch.Generator().manual_seed(5))
    cache = DynamicCache()
    with torch.no_grad():
        first = original(ids[:, :5], past_key_values=None, use_cache=True)
        given = new(ids[:, :5], past_key_values=cache, use_cache=True)
        assert given.logits.shape[1] == 5 and torch.equal(first.logits, given.logits)
        later = original(ids, past_key_values=first.past_key_values, use_cache=True)
        again = new(ids, past_key_values=cache, use_cache=True)
        assert again.logits.shape[1] == 1 and torch.equal(later.logits, again.logits)


# -- a model file that builds another model's encoder (4.6's BertGeneration) --------------------------------------

OTHER_MODEL = """
import torch
from torch import nn
from ...modeling_utils import PreTrainedModel
from ..wren.modeling_wren import WrenEncoder


class FinchModel(PreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.encoder = WrenEncoder(config)

    def forward(self, input_ids, past_key_values=None, use_cache=None):
        past_length = past_key_values[0][0].shape[2] if past_key_values is not None else 0
        positions = torch.arange(past_length, past_length + input_ids.shape[1])
        return self.encoder(self.embed(input_ids) + positions[None, :, None], past_key_values=past_key_values)
"""


@pytest.mark.parametrize("era", ["4.52", "4.56", "5", "portable"])
def test_a_file_that_builds_another_models_encoder_is_a_head_over_that_library_stack(era):
    """`from ..wren.modeling_wren import WrenEncoder` in a file of transformers' layout is the library's stack of
    layers (facts/library_imports.py, `tree=True`): for 4.52, whose runtimes' stacks take the legacy past or a
    Cache, the head reads its past length from either (CM112); for 4.56, whose stacks hand back the Cache they are
    handed, the head must bind what the stack returns for the past to go back as it came (CM116 says so); for 5 and
    portable, whose stacks give back neither hidden states nor attentions, the file is refused at the line that
    builds the stack, naming its module (CM113)."""
    result = migrate(OTHER_MODEL, era, Path("modeling_finch.py"))
    if era == "4.52":
        assert result.status == "migrated" and "CM112" in result.applied, [str(d) for d in result.diagnostics]
        assert "past_key_values.get_seq_length()\n                if isinstance(past_key_values, Cache)" in result.migrated
        return
    if era == "4.56":
        assert result.status == "failed" and result.migrated == OTHER_MODEL
        assert [d.code for d in result.diagnostics] == ["CM901"] and "CM116" in result.diagnostics[0].message
        return
    assert result.status == "failed" and result.migrated == OTHER_MODEL
    refusal = result.diagnostics[0]
    assert (refusal.code, refusal.line) == ("CM113", _line(OTHER_MODEL, "self.encoder = WrenEncoder(config)"))
    assert "`transformers.models.wren.modeling_wren`" in refusal.message


# -- a layer past that holds the layer's input states (4.6's GPT-Neo local attention) ------------------------------

INPUTS_CACHED = """
import torch
from torch import nn
from transformers.modeling_utils import PreTrainedModel


class WrenLocalAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.k = nn.Linear(config.hidden_size, config.hidden_size)
        self.v = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden_states, layer_past=None):
        if layer_past is not None:
            states = torch.cat([layer_past[0], hidden_states], dim=1)
        else:
            states = hidden_states
        key, value = self.k(states), self.v(states)
        out = (hidden_states @ key.transpose(-1, -2)).softmax(-1) @ value
        return out, (states,)


class WrenBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn = WrenLocalAttention(config)

    def forward(self, hidden_states, layer_past=None):
        out, present = self.attn(hidden_states, layer_past=layer_past)
        return hidden_states + out, present


class WrenModel(PreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.h = nn.ModuleList([WrenBlock(config) for _ in range(config.num_layers)])

    def forward(self, hidden_states, past_key_values=None, use_cache=True):
        presents = () if use_cache else None
        for i, block in enumerate(self.h):
            layer_past = past_key_values[i] if past_key_values is not None else None
            hidden_states, present = block(hidden_states, layer_past=layer_past)
            if use_cache:
                presents = presents + (present,)
        return hidden_states, presents
"""


def test_a_past_that_holds_the_layers_input_states_is_refused_saying_so():
    result = migrate(INPUTS_CACHED, "4.52", Path("modeling_wren.py"))
    assert result.status == "failed" and result.migrated == INPUTS_CACHED
    [layout] = [d for d in result.diagnostics if d.code == "CM901"]
    assert layout.line == _line(INPUTS_CACHED, "states = torch.cat([layer_past[0], hidden_states], dim=1)")
    assert (
        "the attention concatenates its past with its own input `hidden_states` "
        "(`torch.cat([layer_past[0], hidden_states], dim=1)`): the layer's past holds the states the layer was given"
    ) in layout.message
