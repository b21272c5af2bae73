"""Composite models: an EncoderDecoderModel whose decoder is the file's causal head."""

from __future__ import annotations

from ..compare import CheckFailed, expect_same
from ..context import MAX_NEW_TOKENS, PROMPT_LEN
from ..models import build_pair
from ..seq2seq import library_encoder
from .common import recording_past_types
from .registry import check, needs_encoder_decoder_decoder


@check(needs_encoder_decoder_decoder)
def encoder_decoder_model(probe) -> str:
    """EncoderDecoderModel (a tiny library BertModel encoder, the file's causal head as decoder with cross-attention):
    greedy and 3-beam generate give the same tokens. In 4.51 it keeps legacy tuples (``_supports_cache_class`` is
    False), so the migrated decoder runs its tuple path and beam search calls the decoder's ``_reorder_cache``."""
    import torch
    from transformers import EncoderDecoderModel

    config = next(t for t in probe.cross_targets if t.kind == "causal").config()
    decoder_o, decoder_m = build_pair(probe.orig, probe.migr, config, probe.seed)
    width = next(t for t in probe.cross_targets if t.kind == "causal").width(decoder_o)
    encoder_o, encoder_m = library_encoder(width, probe.seed)
    models = [
        EncoderDecoderModel(encoder=e, decoder=d).eval() for e, d in ((encoder_o, decoder_o), (encoder_m, decoder_m))
    ]
    ids = probe.ids(2, PROMPT_LEN)
    start = torch.full((2, 1), 1, dtype=torch.long)
    kinds = set()
    for beams in (1, 3):
        kwargs = dict(
            decoder_input_ids=start,
            decoder_start_token_id=1,
            max_new_tokens=MAX_NEW_TOKENS,
            do_sample=False,
            num_beams=beams,
            pad_token_id=0,
        )
        expected = models[0].generate(ids, **kwargs)
        with recording_past_types(decoder_m) as seen:
            got = models[1].generate(ids, **kwargs)
        expect_same(expected, got, f"{beams}-beam tokens")
        kinds.update(t.__name__ for t in seen[1:])
    if not kinds:
        raise CheckFailed("the migrated decoder was never called with a past")
    return f"{MAX_NEW_TOKENS} tokens identical (greedy and 3 beams); the decoder got {'/'.join(sorted(kinds))}"
