"""Diagnostics a user can act on: no internal errors for legacy code the rules do not know, one diagnostic per
statement, a short quote of the user's own line (never a statement flattened onto one line, no comment), no
internal jargon."""

from __future__ import annotations

import textwrap
from pathlib import Path

from cachemigrate.engine import Options, migrate_source
from cachemigrate.excerpts import quote, source_line

PIKE = Path(__file__).resolve().parent.parent / "fixtures" / "unknown_idiom" / "modeling_pike.py"
JARGON = ("TemplateError", "__cm_", "era.toml", "fact", "hole", "template", "view")


def _migrate(code, ruleset, path="modeling_x.py"):
    return migrate_source(code, ruleset, Options(line_length=119), path=path)


def test_a_transformers_2_style_fork_is_reported_not_an_internal_error(ruleset_452):
    code = PIKE.read_text()
    result = _migrate(code, ruleset_452, "modeling_pike.py")
    assert result.status == "failed" and result.migrated == code
    messages = [d.message for d in result.diagnostics]
    assert not any(word in message for word in JARGON for message in messages), messages
    # the accumulator that is not `() if use_cache else None` is named in the user's terms, at the base model
    line = code.splitlines().index("    def forward(self, input_ids=None, past=None, attention_mask=None):") + 1
    presents = [d for d in result.diagnostics if "presents" in d.message]
    assert len(presents) == 1 and presents[0].line == line  # one construct, one diagnostic
    assert any("() if use_cache else None" in d.message for d in presents)


def test_one_statement_gives_one_diagnostic_quoting_its_own_line_without_the_comment(ruleset_452):
    # the past read through `.flip(-1)`: no view of a stored layout (`.transpose(-2, -1)` is one, and migrates)
    code = PIKE.read_text().replace("layer_past[0].transpose(-2, -1)", "layer_past[0].flip(-1)")
    result = _migrate(code, ruleset_452, "modeling_pike.py")
    unpack = "past_key, past_value = layer_past[0].flip(-1), layer_past[1]"
    on_line = [d for d in result.diagnostics if d.code == "CM900" and unpack in d.message]
    assert len(on_line) == 1
    message = on_line[0].message
    assert "`layer_past[0]`" in message and "`layer_past[1]`" in message
    assert "keys back to" not in message  # the line's comment is not quoted


def test_a_use_inside_a_long_call_quotes_the_one_line_it_is_on(ruleset_452):
    code = textwrap.dedent("""
        import torch
        from torch import nn


        class WrenAttention(nn.Module):
            def forward(self, hidden_states, layer_past=None):
                key = value = hidden_states
                if layer_past is not None:
                    key = torch.cat((layer_past[0], key), dim=-2)
                    value = torch.cat((layer_past[1], value), dim=-2)
                return key + value, (key, value)


        class WrenBlock(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.attn = WrenAttention()

            def forward(self, hidden_states, layer_past=None):
                return self.attn(hidden_states, layer_past=layer_past)


        class WrenModel(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.h = nn.ModuleList([WrenBlock(config) for _ in range(2)])

            def forward(self, hidden_states, past_key_values=None):
                for i, block in enumerate(self.h):
                    hidden_states, _ = block(
                        hidden_states,  # the states
                        layer_past=past_key_values[i] if past_key_values else (),  # one layer
                    )
                return hidden_states
        """)
    result = _migrate(code, ruleset_452)
    assert result.status == "failed" and result.migrated == code
    [diagnostic] = [d for d in result.diagnostics if d.code != "CM901"]
    assert "in `layer_past=past_key_values[i] if past_key_values else (),`" in diagnostic.message
    assert "\n" not in diagnostic.message and "hidden_states," not in diagnostic.message
    assert code.splitlines()[diagnostic.line - 1].strip().startswith("layer_past=past_key_values[i]")


def test_source_line_cuts_long_lines_at_a_word_and_keeps_hashes_in_strings():
    code = 'x = "a # not a comment"  # a comment\n' + "y = " + " + ".join(["value"] * 40) + "\n"
    assert source_line(code, 1) == 'x = "a # not a comment"'
    long = source_line(code, 2)
    assert len(long) <= 100 and long.endswith(" …") and long.startswith("y = value + value")
    assert source_line(code, 9) == ""


HEAD_OVER_LIBRARY_MODEL = textwrap.dedent("""
    from torch import nn
    from transformers import GPT2Model, GPT2PreTrainedModel


    class SpeechHead(GPT2PreTrainedModel):
        def __init__(self, config, transformer: GPT2Model):
            super().__init__(config)
            self.transformer = transformer  # handed in: which model takes the past is not shown
            self.out = nn.Linear(config.n_embd, config.vocab_size)

        def forward(self, input_ids=None, past_key_values=None, use_cache=None):
            out = self.transformer(input_ids, past_key_values=past_key_values, use_cache=use_cache)
            return self.out(out[0]), out[1]

        @staticmethod
        def _reorder_cache(past_key_values, beam_idx):
            return tuple(tuple(p.index_select(0, beam_idx) for p in layer) for layer in past_key_values)
""")

MONKEYPATCH = textwrap.dedent("""
    import torch
    from transformers.models.gpt2 import modeling_gpt2


    def fast_forward(self, hidden_states, layer_past=None, use_cache=False):
        key = value = hidden_states
        if layer_past is not None:
            key = torch.cat((layer_past[0], key), dim=-2)
            value = torch.cat((layer_past[1], value), dim=-2)
        return hidden_states, (key, value) if use_cache else None


    modeling_gpt2.GPT2Attention.forward = fast_forward
""")


def test_a_head_handed_its_library_model_is_refused_with_what_is_missing(ruleset_452):
    """A head over a model it is handed (TTS inference heads take the GPT they wrap as an argument) does not show
    which library model takes the past: CM903, saying so (a head that builds it migrates: tests/test_heads.py)."""
    result = _migrate(HEAD_OVER_LIBRARY_MODEL, ruleset_452)
    assert result.status == "failed" and result.migrated == HEAD_OVER_LIBRARY_MODEL
    [diagnostic] = result.diagnostics
    assert diagnostic.code == "CM903"
    assert "SpeechHead subclasses `GPT2PreTrainedModel` of the installed transformers" in diagnostic.message
    assert "hands the past to no model it builds in its `__init__`" in diagnostic.message
    assert "port `SpeechHead._reorder_cache` by hand" in diagnostic.message
    assert not any(word in diagnostic.message for word in JARGON)


def test_a_patch_of_the_tuple_contract_is_refused_for_era_452_naming_why(ruleset_452):
    """(Eras 4.56, 5 and portable migrate it: tests/test_patches.py.)"""
    result = _migrate(MONKEYPATCH, ruleset_452)
    assert result.status == "failed" and result.migrated == MONKEYPATCH
    [diagnostic] = result.diagnostics
    assert (diagnostic.code, diagnostic.line) == ("CM627", 6)
    assert (
        "fast_forward stands in for the `forward` of a library attention and takes `layer_past`" in diagnostic.message
    )


def test_a_monkeypatched_forward_of_a_class_not_from_transformers_names_what_is_missing(ruleset_452):
    code = MONKEYPATCH.replace(
        "from transformers.models.gpt2 import modeling_gpt2", "from fastattn import modeling_gpt2"
    )
    result = _migrate(code, ruleset_452)
    assert result.status == "failed" and result.migrated == code
    [diagnostic] = result.diagnostics
    assert (diagnostic.code, diagnostic.line) == ("CM916", 14)
    expected = "fast_forward is assigned to `modeling_gpt2.GPT2Attention.forward`, but `modeling_gpt2` is not imported"
    assert f"{expected} from transformers" in diagnostic.message


def test_tuple_code_in_a_plain_function_that_patches_nothing_keeps_the_generic_diagnostic(ruleset_452):
    code = MONKEYPATCH.replace("modeling_gpt2.GPT2Attention.forward = fast_forward\n", "")
    [diagnostic] = _migrate(code, ruleset_452).diagnostics
    assert diagnostic.code == "CM903" and "no attention/block/model structure" in diagnostic.message


REORDER_ONLY = textwrap.dedent("""
    from torch import nn

    from ...modeling_utils import PoolerAnswerClass


    class LongMemoryModel(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.pooler = PoolerAnswerClass(config)

        def forward(self, hidden_states, past_key_values=None):
            return self.pooler(hidden_states), past_key_values

        @staticmethod
        def _reorder_cache(past_key_values, beam_idx):
            reordered = ()
            for layer_past in past_key_values:
                # every state of the layer, batch first
                reordered += (tuple(state.index_select(0, beam_idx) for state in layer_past),)
            return reordered
""")


def test_a_loop_over_the_cache_is_quoted_by_its_header_line_not_its_whole_body(ruleset_452):
    [diagnostic] = _migrate(REORDER_ONLY, ruleset_452).diagnostics
    assert diagnostic.code == "CM903"
    assert "(`for layer_past in past_key_values:`)" in diagnostic.message
    assert "every state" not in diagnostic.message and "index_select" not in diagnostic.message


def test_classes_from_the_library_three_dots_up_are_not_called_a_sibling_module(ruleset_452):
    [diagnostic] = _migrate(REORDER_ONLY, ruleset_452).diagnostics
    assert "another module of its package" not in diagnostic.message and "PoolerAnswerClass" not in diagnostic.message
    assert "no attention/block/model structure using it was recognised" in diagnostic.message
    sibling = REORDER_ONLY.replace("from ...modeling_utils import", "from .modeling_utils import")
    [diagnostic] = _migrate(sibling, ruleset_452).diagnostics
    assert (
        "`PoolerAnswerClass` (from `.modeling_utils`), defined in another module of its package" in diagnostic.message
    )


def test_quote_keeps_one_line_and_marks_what_it_left_out():
    assert quote("past[0]") == "past[0]"
    assert quote("layer(x, past, # the cache of the layer\n use_cache)") == "layer(x, past, …"
    long = quote("f(" + ", ".join(["past"] * 40) + ")")
    assert len(long) <= 100 and long.endswith(" …")


FAIRSEQ_STATE = textwrap.dedent("""
    import torch
    from torch import nn


    class Attention(nn.Module):
        def forward(self, query, key, layer_state=None):
            saved = layer_state.get("self", {}) if layer_state is not None else {}
            if "prev_key" in saved:
                key = torch.cat([saved["prev_key"], key], dim=1)
            if layer_state is not None:
                layer_state["self"] = {"prev_key": key}
            return query @ key.transpose(1, 2)


    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Attention() for _ in range(2)])

        def forward(self, x, past_key_values=None):
            for idx, layer in enumerate(self.layers):
                layer_state = past_key_values[idx] if past_key_values is not None else None
                x = layer(x, x, layer_state=layer_state)
            return x
""")


def test_a_cache_of_dicts_is_named_as_such_not_as_an_unrecognised_structure(ruleset_452):
    [diagnostic] = _migrate(FAIRSEQ_STATE, ruleset_452).diagnostics
    assert diagnostic.code == "CM903"
    assert 'one layer\'s past is a dict (`layer_state.get("self", {})`), fairseq style' in diagnostic.message
    tuples = FAIRSEQ_STATE.replace('layer_state.get("self", {})', "layer_state[0]")
    tuples = tuples.replace('saved["prev_key"]', "saved[0]").replace('layer_state["self"] = {"prev_key": key}', "pass")
    [diagnostic] = _migrate(tuples, ruleset_452).diagnostics
    assert "is a dict" not in diagnostic.message


AUTO_WRAPPER = textwrap.dedent("""
    from torch import nn
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM


    class CaptionModel(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = AutoConfig.from_pretrained("unused")
            self.vision = AutoModel.from_config(config.vision_config)
            self.language_model = AutoModelForCausalLM.from_config(config.text_config)

        def forward(self, input_ids, past_key_values=None):
            offset = past_key_values[0][0].shape[2] if past_key_values is not None else 0
            return self.language_model(input_ids, past_key_values=past_key_values), offset
""")


def test_a_wrapper_around_an_auto_model_names_the_models_it_builds(ruleset_452):
    [diagnostic] = _migrate(AUTO_WRAPPER, ruleset_452).diagnostics
    assert diagnostic.code == "CM903"
    assert "wraps a model it builds with `AutoModel.from_config` or `AutoModelForCausalLM.from_config`" in (
        diagnostic.message
    )
    assert "AutoConfig" not in diagnostic.message
    plain = AUTO_WRAPPER.replace("AutoModel.from_config", "make_vision").replace(
        "AutoModelForCausalLM.from_config", "make_decoder"
    )
    [diagnostic] = _migrate(plain, ruleset_452).diagnostics
    assert "wraps a model" not in diagnostic.message
