"""generate(): greedy (the migrated model must be handed a Cache), beam search, left padding."""

from __future__ import annotations

from ..compare import CheckFailed, CheckSkipped, expect_same, logits, one_line
from ..context import MAX_NEW_TOKENS, PROMPT_LEN
from .common import generate, own_generate, recording_past_types, tuple_only_library_model, unclaimed_library_head
from .registry import check, needs_decoder_only, needs_head


@check(needs_decoder_only, needs_head)
def generate_greedy(probe) -> str:
    """Greedy generate gives the same tokens, and the migrated model is handed a Cache while decoding (unless the
    head's own generate() sets up none, as MusicGen's: then it decodes on the tuple path, as the original)."""
    from transformers.cache_utils import Cache

    original, migrated = probe.pair()
    ids = probe.ids(2, PROMPT_LEN)
    expected = generate(original, ids)
    with recording_past_types(migrated) as seen:
        got = generate(migrated, ids)
    expect_same(expected, got, "tokens")
    if own_generate(migrated) and not any(issubclass(t, Cache) for t in seen[1:]):
        return f"{MAX_NEW_TOKENS} new tokens identical; migrated: its own generate() keeps tuples, as the original's"
    if tuple_only_library_model(migrated) and not any(issubclass(t, Cache) for t in seen[1:]):
        return f"{MAX_NEW_TOKENS} new tokens identical; decoded with tuples: {tuple_only_library_model(migrated)}"
    if unclaimed_library_head(migrated) and not any(issubclass(t, Cache) for t in seen[1:]):
        return f"{MAX_NEW_TOKENS} new tokens identical; decoded with tuples: {unclaimed_library_head(migrated)}"
    if not any(issubclass(t, Cache) for t in seen[1:]):
        names = sorted({t.__name__ for t in seen[1:]})
        raise CheckFailed(f"tokens identical, but the migrated model never received a Cache (got {', '.join(names)})")
    return f"{MAX_NEW_TOKENS} new tokens identical; migrated decoded with {seen[-1].__name__}"


@check(needs_decoder_only, needs_head)
def generate_beam(probe) -> str:
    """Beam search (3 beams) gives the same tokens. Skipped where the original's generate() runs greedy but refuses
    beams (MusicGen's has no beam search)."""
    original, migrated = probe.pair()
    ids = probe.ids(2, PROMPT_LEN)
    try:
        expected = generate(original, ids, num_beams=3)
    except Exception as exc:  # noqa: BLE001 - the original's own limit, if greedy runs
        generate(original, ids)  # greedy fails too: not a beam limit, let the probe classify it
        raise CheckSkipped(f"the original's generate() runs greedy but not 3 beams: {one_line(exc)}") from exc
    expect_same(expected, generate(migrated, ids, num_beams=3), "tokens")
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
