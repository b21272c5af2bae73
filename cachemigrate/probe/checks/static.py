"""The static tier, a path only the migrated model has: StaticCache generate, and a fullgraph compiled decode step.

The migrated model's calls on these paths go through :func:`call_under_test`: a crash there is a failure of the
migration, not a set-up error, even though the original cannot take these paths at all.
"""

from __future__ import annotations

from ..compare import CheckFailed, expect_same, logits
from ..context import MAX_NEW_TOKENS, PROMPT_LEN, STEPS
from .common import call_under_test, generate, recording_past_types
from .registry import check, needs_decoder_only, needs_head, needs_static


@check(needs_decoder_only, needs_static, needs_head)
def static_generate(probe) -> str:
    """``generate(cache_implementation="static")`` on the migrated model gives the original's greedy tokens, on
    a plain batch and on a left-padded one."""
    import torch
    from transformers.cache_utils import StaticCache

    original, migrated = probe.pair()
    ids = probe.ids(2, PROMPT_LEN)
    mask = torch.ones_like(ids)
    padded, padded_mask = ids.clone(), mask.clone()
    padded[0, :2], padded_mask[0, :2] = 0, 0
    for name, (tokens, attention) in {"plain": (ids, mask), "left-padded": (padded, padded_mask)}.items():
        expected = generate(original, tokens, attention)
        with recording_past_types(migrated) as seen:
            got = call_under_test(generate, migrated, tokens, attention, cache_implementation="static")
        expect_same(expected, got, f"{name} tokens")
        if not any(issubclass(t, StaticCache) for t in seen):
            raise CheckFailed("tokens identical, but the migrated model never received a StaticCache")
    return f"{MAX_NEW_TOKENS} new tokens identical with a StaticCache, plain and left-padded"


def _static_cache(model, batch: int, length: int):
    import torch
    from transformers.cache_utils import StaticCache

    return StaticCache(
        config=model.config, max_batch_size=batch, max_cache_len=length, device="cpu", dtype=torch.float32
    )


@check(needs_decoder_only, needs_static)
def static_compile(probe) -> str:
    """A decode step of ``torch.compile(model.forward, fullgraph=True)`` (backend "eager": it checks that the
    graph captures whole, not the speed) with a StaticCache matches the eager step, and both match the
    original's tuple-cache step up to float tolerance."""
    import torch

    original, migrated = probe.pair()
    prompt, steps = probe.prompt_and_steps()
    length = PROMPT_LEN + STEPS + 2
    position = torch.arange(PROMPT_LEN, PROMPT_LEN + 1)
    results = []
    for compiled in (False, True):
        cache = _static_cache(migrated, prompt.shape[0], length)
        prefill = torch.arange(PROMPT_LEN)
        call_under_test(migrated, input_ids=prompt, past_key_values=cache, use_cache=True, cache_position=prefill)
        forward = torch.compile(migrated.forward, fullgraph=True, backend="eager") if compiled else migrated.forward
        out = call_under_test(
            forward, input_ids=steps[0], past_key_values=cache, use_cache=True, cache_position=position
        )
        results.append(logits(out))
        torch._dynamo.reset()
    expect_same(results[0], results[1], "compiled vs eager decode logits")
    reference = logits(original(input_ids=steps[0], past_key_values=probe.original_past(original, prompt)))
    gap = (reference - results[0]).abs().max().item()
    if gap > 1e-5:
        raise CheckFailed(f"static decode step differs from the original's tuple-cache step by {gap:.3e}")
    return f"fullgraph compiled decode step equals eager; {gap:.1e} from the original's tuple-cache step"
