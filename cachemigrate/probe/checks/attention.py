"""Attention implementations other than eager."""

from __future__ import annotations

from .forward import no_cache_logits, stepwise
from .registry import check, needs_decoder_only, needs_sdpa


@check(needs_decoder_only, needs_sdpa)
def sdpa(probe) -> str:
    """logits_no_cache and tuple_cache_stepwise again with sdpa attention."""
    return f"{no_cache_logits(probe, 'sdpa')}; {stepwise(probe, 'sdpa')}"
