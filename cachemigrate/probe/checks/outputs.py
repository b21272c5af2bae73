"""Output options: ``output_attentions`` and the ``return_dict=False`` tuple layout."""

from __future__ import annotations

from ..compare import clone, expect_same, layout, past
from .registry import check, needs_decoder_only


@check(needs_decoder_only)
def output_attentions(probe) -> str:
    """Eager attention weights, for the prompt and for one cached step."""
    original, migrated = probe.pair()
    prompt, steps = probe.prompt_and_steps()
    out_o = original(input_ids=prompt, use_cache=True, output_attentions=True)
    out_m = migrated(input_ids=prompt, use_cache=True, output_attentions=True)
    expect_same(out_o.attentions, out_m.attentions, "prompt attentions")
    step_o = original(input_ids=steps[0], past_key_values=past(out_o), use_cache=True, output_attentions=True)
    step_m = migrated(input_ids=steps[0], past_key_values=past(out_m), use_cache=True, output_attentions=True)
    expect_same(step_o.attentions, step_m.attentions, "cached-step attentions")
    return f"{len(out_o.attentions)} layers identical (prompt and cached step)"


@check(needs_decoder_only)
def output_hidden_states(probe) -> str:
    """Every layer's hidden states, for the prompt and for one cached step (the accumulation of hidden states
    sits next to the accumulation of presents, which the migration rewrites)."""
    original, migrated = probe.pair()
    prompt, steps = probe.prompt_and_steps()
    out_o = original(input_ids=prompt, use_cache=True, output_hidden_states=True)
    out_m = migrated(input_ids=prompt, use_cache=True, output_hidden_states=True)
    expect_same(out_o.hidden_states, out_m.hidden_states, "prompt hidden states")
    step_o = original(input_ids=steps[0], past_key_values=past(out_o), use_cache=True, output_hidden_states=True)
    step_m = migrated(input_ids=steps[0], past_key_values=past(out_m), use_cache=True, output_hidden_states=True)
    expect_same(step_o.hidden_states, step_m.hidden_states, "cached-step hidden states")
    return f"{len(out_o.hidden_states)} hidden states identical (prompt and cached step)"


@check(needs_decoder_only)
def return_dict_false(probe) -> str:
    """``return_dict=False, use_cache=True``: the original's tuple layout, past included, with and without a past in.

    Without a past in, the original returned a legacy tuple past, so the migrated model must too (not a Cache).
    """
    original, migrated = probe.pair()
    prompt, steps = probe.prompt_and_steps()
    out_o = original(input_ids=prompt, use_cache=True, return_dict=False)
    out_m = migrated(input_ids=prompt, use_cache=True, return_dict=False)
    expect_same(out_o, out_m, "no past: out")
    given = clone(past(out_o))
    step_o = original(steps[0], past_key_values=clone(given), use_cache=True, return_dict=False)
    step_m = migrated(steps[0], past_key_values=clone(given), use_cache=True, return_dict=False)
    expect_same(step_o, step_m, "tuple past: out")
    return f"layout {layout(out_o)} identical, with and without a past"
