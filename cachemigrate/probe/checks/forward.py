"""Forward passes: no cache, tuple caches step by step, ``use_cache=False`` with a past, tuple in -> tuple out."""

from __future__ import annotations

from ..compare import CheckFailed, clone, expect_same, kind, layout, logits, past
from ..context import PROMPT_LEN, STEPS
from .registry import check, needs_decoder_only


def no_cache_logits(probe, attn: str) -> str:
    original, migrated = probe.pair(attn)
    ids = probe.ids(2, 7)
    expect_same(
        logits(original(input_ids=ids, use_cache=False)), logits(migrated(input_ids=ids, use_cache=False)), "logits"
    )
    return f"logits {tuple(ids.shape)} bit-identical"


def stepwise(probe, attn: str) -> str:
    original, migrated = probe.pair(attn)
    prompt, steps = probe.prompt_and_steps()
    past_o = past_m = None
    kinds = set()
    for i, tokens in enumerate([prompt, *steps]):
        out_o = original(input_ids=tokens, past_key_values=past_o, use_cache=True)
        out_m = migrated(input_ids=tokens, past_key_values=past_m, use_cache=True)
        expect_same(logits(out_o), logits(out_m), f"step {i} logits")
        past_o, past_m = past(out_o), past(out_m)
        kinds.add(kind(past_m))
    return f"prompt {PROMPT_LEN} + {STEPS} steps bit-identical; migrated past: {'/'.join(sorted(kinds))}"


@check(needs_decoder_only)
def logits_no_cache(probe) -> str:
    """Full forward without a cache."""
    return no_cache_logits(probe, "eager")


@check(needs_decoder_only)
def tuple_cache_stepwise(probe) -> str:
    """Prompt, then single tokens, each model stepping with the past it returned itself."""
    return stepwise(probe, "eager")


@check(needs_decoder_only)
def use_cache_false_with_past(probe) -> str:
    """A tuple past with ``use_cache=False``: same logits, and neither model returns a past."""
    original, migrated = probe.pair()
    prompt, steps = probe.prompt_and_steps()
    given = probe.original_past(original, prompt)
    out_o = original(input_ids=steps[0], past_key_values=clone(given), use_cache=False)
    out_m = migrated(input_ids=steps[0], past_key_values=clone(given), use_cache=False)
    expect_same(logits(out_o), logits(out_m), "logits")
    for who, out in (("original", out_o), ("migrated", out_m)):
        if past(out) is not None:
            raise CheckFailed(f"{who} returned a past ({kind(past(out))}) with use_cache=False")
    return "logits bit-identical; no past returned"


@check(needs_decoder_only)
def tuple_in_tuple_out(probe) -> str:
    """A tuple past in gives a past out in the original's legacy layout, with equal values."""
    original, migrated = probe.pair()
    prompt, steps = probe.prompt_and_steps()
    given = probe.original_past(original, prompt)
    out_o = original(input_ids=steps[0], past_key_values=clone(given), use_cache=True)
    out_m = migrated(input_ids=steps[0], past_key_values=clone(given), use_cache=True)
    expect_same(logits(out_o), logits(out_m), "logits")
    expect_same(past(out_o), past(out_m), "past")
    return f"past {layout(past(out_o))} x{len(past(out_o))} equal"
