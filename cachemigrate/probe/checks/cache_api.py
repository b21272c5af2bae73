"""The Cache API, a path only the migrated model has: a DynamicCache passed in is the cache that is updated."""

from __future__ import annotations

from ..compare import CheckFailed, clone, expect_same, kind, logits, pairs_of_cache_layout, past
from ..context import PROMPT_LEN
from .common import call_under_test
from .registry import check, needs_decoder_only


def _expect_cache_step(out, cache, length: int, reference_logits, what: str) -> None:
    returned = past(out)
    if returned is not cache:
        raise CheckFailed(f"{what}: returned {kind(returned)}, not the DynamicCache passed in")
    if cache.get_seq_length() != length:
        raise CheckFailed(f"{what}: get_seq_length() is {cache.get_seq_length()}, expected {length}")
    expect_same(reference_logits, logits(out), f"{what} logits")


@check(needs_decoder_only)
def dynamic_cache_in_same_object(probe) -> str:
    """A DynamicCache passed in (empty, or from_legacy_cache) comes back as the same object, grown in place."""
    from transformers.cache_utils import DynamicCache

    original, migrated = probe.pair()
    prompt, steps = probe.prompt_and_steps()
    out = original(input_ids=prompt, use_cache=True)
    reference = [logits(out)]
    given = past(out)
    lengths = [_held(given, PROMPT_LEN)]  # what the original's past holds after each step
    for i, tokens in enumerate(steps, 1):
        out = original(input_ids=tokens, past_key_values=given, use_cache=True)
        reference.append(logits(out))
        given = past(out)
        lengths.append(_held(given, PROMPT_LEN + i))

    cache = DynamicCache()
    for i, tokens in enumerate([prompt, *steps]):
        out = call_under_test(migrated, input_ids=tokens, past_key_values=cache, use_cache=True)
        _expect_cache_step(out, cache, lengths[i], reference[i], f"empty cache, step {i}")

    done = f"same object, grew to {lengths[-1]} tokens; logits equal the tuple path"
    original_past = probe.original_past(original, prompt)
    if not pairs_of_cache_layout(original_past):
        # fused key-value tensors, keys transposed, batch and heads merged: from_legacy_cache would build a
        # Cache of the wrong tensors, which no caller can hand this model
        return done + " (from_legacy_cache not tried: the file's legacy past is not (key, value) in a Cache's layout)"
    legacy = DynamicCache.from_legacy_cache(clone(original_past))
    out = call_under_test(migrated, input_ids=steps[0], past_key_values=legacy, use_cache=True)
    _expect_cache_step(out, legacy, lengths[1], reference[1], "from_legacy_cache")
    return done


def _held(legacy, fed: int) -> int:
    """The number of positions the original's legacy past holds: its keys' sequence axis when the past is
    (key, value) pairs in a Cache's layout (more than was fed when the model adds positions of its own: CPM-Ant
    prepends its prompt tokens), else the number of tokens fed."""
    return legacy[0][0].shape[-2] if pairs_of_cache_layout(legacy) else fed
