"""The Cache API, a path only the migrated model has: a DynamicCache passed in is the cache that is updated."""

from __future__ import annotations

from ..compare import CheckFailed, CheckSkipped, clone, expect_same, kind, logits, past
from ..context import PROMPT_LEN
from ..runtime import in_cache_layout
from .common import call_under_test, tuple_only_library_model
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
    if tuple_only_library_model(migrated):
        raise CheckSkipped(tuple_only_library_model(migrated))
    prompt, steps = probe.prompt_and_steps()
    out = original(input_ids=prompt, use_cache=True)
    reference = [logits(out)]
    pasts = [past(out)]  # what the original's past is after each step
    for tokens in steps:
        out = original(input_ids=tokens, past_key_values=pasts[-1], use_cache=True)
        reference.append(logits(out))
        pasts.append(past(out))
    standard = len(pasts) > 1 and in_cache_layout(pasts[0], pasts[1])
    # the positions each past holds: its keys' sequence axis when it is (key, value) pairs in a Cache's layout
    # (more than was fed when the model adds positions of its own: CPM-Ant prepends its prompt tokens), else the
    # number of tokens fed
    lengths = [given[0][0].shape[-2] if standard else PROMPT_LEN + i for i, given in enumerate(pasts)]

    cache = DynamicCache()
    for i, tokens in enumerate([prompt, *steps]):
        out = call_under_test(migrated, input_ids=tokens, past_key_values=cache, use_cache=True)
        _expect_cache_step(out, cache, lengths[i], reference[i], f"empty cache, step {i}")

    done = f"same object, grew to {lengths[-1]} tokens; logits equal the tuple path"
    original_past = probe.original_past(original, prompt)
    if not standard:
        # [batch, seq, heads, d], sequence-first, fused key-value tensors, keys transposed, batch and heads merged:
        # from_legacy_cache would build a Cache of the wrong tensors, which no caller can hand this model
        return done + " (from_legacy_cache not tried: the file's legacy past is not (key, value) in a Cache's layout)"
    legacy = DynamicCache.from_legacy_cache(clone(original_past))
    out = call_under_test(migrated, input_ids=steps[0], past_key_values=legacy, use_cache=True)
    _expect_cache_step(out, legacy, lengths[1], reference[1], "from_legacy_cache")
    return done
