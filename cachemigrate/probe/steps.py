"""How a model is handed the tokens of a cached step: the new token alone (nearly every model), or the whole
sequence again, of which the model itself skips what its past holds (CPM-Ant slices its inputs by the past
length). The ORIGINAL model decides, and both files are then stepped the same way."""

from __future__ import annotations

from .compare import clone, logits, past


def refeeds_whole_sequence(model, tokens) -> bool:
    """True when ``model``, given its own past of ``tokens[:, :-1]``, cannot take the last token alone but takes
    all of ``tokens`` and answers for the last one only (it skipped what the past holds). False for every other
    model: one that takes the new token alone, or one that can do neither (its checks then say what they see)."""
    import torch

    with torch.no_grad():
        try:
            given = past(model(input_ids=tokens[:, :-1], use_cache=True))
        except Exception:  # noqa: BLE001 - a model that cannot do this is stepped as usual
            return False
        if given is None or _new_positions(model, tokens[:, -1:], given) is not None:
            return False
        return _new_positions(model, tokens, given) == 1


def _new_positions(model, ids, given) -> int | None:
    """How many positions ``model`` answers for, given ``ids`` and a copy of the past ``given``; None if it fails."""
    try:
        out = logits(model(input_ids=ids, past_key_values=clone(given), use_cache=True))
    except Exception:  # noqa: BLE001 - this convention is not the model's
        return None
    return out.shape[1] if out.dim() >= 2 else None
