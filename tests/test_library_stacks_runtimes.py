"""A toy head over transformers' own stack of layers (``self.encoder = BertEncoder(config)``, imported from
``transformers.models.bert.modeling_bert``; the head embeds, masks and generates itself), migrated for era 4.56 and
run on 4.57.6 against its original on 4.51.3 (the cross-version probe, ``runtimes``): tuple steps, a Cache grown in
place, ``use_cache=False`` with a past, cross-attention written once, a self-attention Cache with encoder states,
greedy and beam generate() all give the original's tensors and tokens. For 5 and portable it is refused (CM113 of
era 5). And the vendored helper that gives the stack's past back (``stack_past_as_handed``), on 4.51.3's caches."""

from __future__ import annotations

import functools
import os
import textwrap
from pathlib import Path

import pytest
import torch

from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset

REPO = Path(__file__).resolve().parent.parent
TF4576 = os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python")

KESTREL = textwrap.dedent(
    '''
    import torch
    from torch import nn

    from transformers import BertConfig, PreTrainedModel
    from transformers.modeling_outputs import CausalLMOutputWithCrossAttentions
    from transformers.models.bert.modeling_bert import BertEncoder


    class KestrelPreTrainedModel(PreTrainedModel):
        config_class = BertConfig
        base_model_prefix = "kestrel"


    class KestrelModel(KestrelPreTrainedModel):
        def __init__(self, config):
            super().__init__(config)
            self.tokens = nn.Embedding(config.vocab_size, config.hidden_size)
            self.places = nn.Embedding(config.max_position_embeddings, config.hidden_size)
            self.encoder = BertEncoder(config)

        def forward(
            self,
            input_ids,
            attention_mask=None,
            encoder_hidden_states=None,
            past_key_values=None,
            use_cache=None,
            return_dict=True,
        ):
            use_cache = use_cache if use_cache is not None else self.config.use_cache
            start = past_key_values[0][0].shape[2] if past_key_values is not None else 0
            width = input_ids.shape[1]
            places = torch.arange(start, start + width, device=input_ids.device)
            hidden = self.tokens(input_ids) + self.places(places)[None]
            seen = torch.tril(torch.ones(start + width, start + width, dtype=torch.bool, device=input_ids.device))[-width:]
            if attention_mask is not None:
                seen = seen[None] & attention_mask[:, None, :].bool()
            else:
                seen = seen[None]
            blocked = (~seen[:, None]).to(hidden.dtype) * torch.finfo(hidden.dtype).min
            outputs = self.encoder(
                hidden,
                attention_mask=blocked,
                encoder_hidden_states=encoder_hidden_states,
                past_key_values=past_key_values,
                use_cache=use_cache,
                return_dict=return_dict,
            )
            return outputs


    class KestrelForCausalLM(KestrelPreTrainedModel):
        def __init__(self, config):
            super().__init__(config)
            self.kestrel = KestrelModel(config)
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size)

        def forward(
            self,
            input_ids,
            attention_mask=None,
            encoder_hidden_states=None,
            past_key_values=None,
            use_cache=None,
            return_dict=None,
            **kwargs,
        ):
            return_dict = return_dict if return_dict is not None else self.config.use_return_dict
            outputs = self.kestrel(
                input_ids,
                attention_mask=attention_mask,
                encoder_hidden_states=encoder_hidden_states,
                past_key_values=past_key_values,
                use_cache=use_cache,
                return_dict=return_dict,
            )
            logits = self.lm_head(outputs[0])
            if not return_dict:
                return (logits,) + tuple(outputs[1:])
            return CausalLMOutputWithCrossAttentions(logits=logits, past_key_values=outputs.past_key_values)

        def prepare_inputs_for_generation(self, input_ids, past_key_values=None, attention_mask=None, **kwargs):
            if past_key_values is not None:
                input_ids = input_ids[:, -1:]
            return {"input_ids": input_ids, "attention_mask": attention_mask, "past_key_values": past_key_values}

        def _reorder_cache(self, past_key_values, beam_idx):
            return tuple(tuple(state.index_select(0, beam_idx) for state in layer) for layer in past_key_values)
    '''
).lstrip()


@functools.cache
def ruleset(era: str):
    return load_ruleset(era)


def migrate(code: str, era: str):
    return migrate_source(code, ruleset(era), Options(line_length=119), path="modeling_kestrel.py")


def test_for_era_4_56_the_toy_migrates_with_the_stack_rules():
    result = migrate(KESTREL, "4.56")
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    assert {"CM113", "CM114", "CM116"} <= set(result.applied) and "CM109" not in result.applied
    assert "return_self_attention_cache = not return_legacy_cache" in result.migrated  # it takes encoder states


@pytest.mark.parametrize("era", ["5", "portable"])
def test_for_transformers_5_the_toy_is_refused_at_its_stack(era):
    result = migrate(KESTREL, era)
    assert result.status == "failed" and [d.code for d in result.diagnostics] == ["CM113"]
    [line] = [n for n, text in enumerate(KESTREL.splitlines(), 1) if "self.encoder = BertEncoder(config)" in text]
    assert result.diagnostics[0].line == line
    assert "`transformers.models.bert.modeling_bert`" in result.diagnostics[0].message


@pytest.mark.runtimes
def test_on_4_57_6_the_migrated_toy_gives_the_originals_tensors_and_tokens(tmp_path):
    from cachemigrate.probe.cross import run_cross_probe
    from cachemigrate.probe.report import PASS, SKIP

    if not Path(TF4576).is_file():
        pytest.skip(f"no interpreter at {TF4576}")
    folders = {name: tmp_path / name for name in ("original", "migrated")}
    for folder in folders.values():
        folder.mkdir()
    original, migrated = folders["original"] / "modeling_kestrel.py", folders["migrated"] / "modeling_kestrel.py"
    original.write_text(KESTREL)
    migrated.write_text(migrate(KESTREL, "4.56").migrated)
    report = run_cross_probe(original, migrated, migrated_python=TF4576, timeout=300)
    statuses = {r.name: r.status for r in report.results}
    assert set(statuses.values()) <= {PASS, SKIP}, [(r.name, r.status, r.detail) for r in report.results]
    for check in (
        "tuple_in_tuple_out", "tuple_cache_stepwise", "cache_in_same_cache", "use_cache_false_with_past",
        "return_dict_false", "generate_greedy", "generate_beam", "cross_tuple_stepwise",
        "cross_use_cache_false_with_past", "cross_cache_written_once", "cross_self_only_cache", "cross_generate",
    ):  # fmt: skip
        assert statuses[check] == PASS, (check, statuses)


# -- the vendored helper, on the caches of the installed transformers ------------------------------------------------


def _helper():
    space: dict = {}
    exec((REPO / "rules" / "vendor" / "library_past.py").read_text(), space)
    return space["stack_past_as_handed"]


def _tensors(*shape_seq):
    return [torch.randn(1, 2, length, 4) for length in shape_seq]


def test_a_tuple_caller_gets_each_layers_tensors_with_the_cross_attentions_where_written():
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache
    from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions as Outputs

    stack_past_as_handed = _helper()
    own, cross = _tensors(3, 3), _tensors(5, 5)
    both = EncoderDecoderCache.from_legacy_cache(((own[0], own[1], cross[0], cross[1]),))
    back = stack_past_as_handed(Outputs(last_hidden_state=own[0], past_key_values=both), True, True)
    [layer] = back.past_key_values
    assert len(layer) == 4 and all(torch.equal(a, b) for a, b in zip(layer, (*own, *cross)))
    # an EncoderDecoderCache whose cross-attention part was never written goes back with self-attention tensors only
    alone = EncoderDecoderCache(DynamicCache.from_legacy_cache(((own[0], own[1]),)), DynamicCache())
    [layer] = stack_past_as_handed((own[0], alone), True, True)[1]
    assert len(layer) == 2 and torch.equal(layer[0], own[0])


def test_no_past_goes_back_where_the_stack_was_handed_no_use_cache():
    from transformers.cache_utils import DynamicCache
    from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions as Outputs

    stack_past_as_handed = _helper()
    own = _tensors(3, 3)
    cache = DynamicCache.from_legacy_cache(((own[0], own[1]),))
    assert stack_past_as_handed((own[0], cache), True, False) == (own[0],)
    back = stack_past_as_handed(Outputs(last_hidden_state=own[0], past_key_values=cache), True, False)
    assert back.past_key_values is None and "past_key_values" not in back.keys()
    assert torch.equal(back.last_hidden_state, own[0])


def test_a_self_attention_cache_the_head_wrapped_goes_back_as_itself():
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    stack_past_as_handed = _helper()
    own = _tensors(3, 3)
    handed = DynamicCache.from_legacy_cache(((own[0], own[1]),))
    wrapped = EncoderDecoderCache(handed, DynamicCache())
    assert stack_past_as_handed((own[0], wrapped), False, True)[1] is handed
