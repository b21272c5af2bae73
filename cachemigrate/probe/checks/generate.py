"""generate(): greedy (the migrated model must be handed a Cache), beam search, left padding."""

from __future__ import annotations

from ..compare import CheckFailed, expect_same, logits
from ..context import MAX_NEW_TOKENS, PROMPT_LEN
from .common import generate, recording_past_types
from .registry import check, needs_decoder_only, needs_head


@check(needs_decoder_only, needs_head)
def generate_greedy(probe) -> str:
    """Greedy generate gives the same tokens, and the migrated model is handed a Cache while decoding."""
    from transformers.cache_utils import Cache

    original, migrated = probe.pair()
    ids = probe.ids(2, PROMPT_LEN)
    expected = generate(original, ids)
    with recording_past_types(migrated) as seen:
        got = generate(migrated, ids)
    expect_same(expected, got, "tokens")
    if not any(issubclass(t, Cache) for t in seen[1:]):
        names = sorted({t.__name__ for t in seen[1:]})
        raise CheckFailed(f"tokens identical, but the migrated model never received a Cache (got {', '.join(names)})")
    return f"{MAX_NEW_TOKENS} new tokens identical; migrated decoded with {seen[-1].__name__}"


@check(needs_decoder_only, needs_head)
def generate_beam(probe) -> str:
    """Beam search (3 beams) gives the same tokens."""
    original, migrated = probe.pair()
    ids = probe.ids(2, PROMPT_LEN)
    expect_same(generate(original, ids, num_beams=3), generate(migrated, ids, num_beams=3), "tokens")
    return f"{MAX_NEW_TOKENS} new tokens identical (3 beams)"


@check(needs_decoder_only)
def left_padding(probe) -> str:
    """A left-padded batch: same no-cache logits at unmasked positions and the same greedy tokens."""
    import torch

    original, migrated = probe.pair()
    ids = probe.ids(2, 7)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    ids[0, :3] = 0
    keep = mask.bool()
    logits_o = logits(original(input_ids=ids, attention_mask=mask, use_cache=False))
    logits_m = logits(migrated(input_ids=ids, attention_mask=mask, use_cache=False))
    expect_same(logits_o[keep], logits_m[keep], "unmasked logits")
    if not probe.has_head:
        return "unmasked logits bit-identical; generate skipped (no head)"
    expect_same(generate(original, ids, mask), generate(migrated, ids, mask), "tokens")
    return "unmasked logits and greedy tokens identical"
