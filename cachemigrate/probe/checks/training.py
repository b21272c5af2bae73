"""Training paths."""

from __future__ import annotations

from ..compare import expect_same, logits
from .registry import check, needs_decoder_only, needs_gradient_checkpointing


@check(needs_decoder_only, needs_gradient_checkpointing, grad=True)
def gradient_checkpointing(probe) -> str:
    """Training step with gradient checkpointing: same loss and gradients, bit for bit. The loss is the head's on
    ``labels=input_ids``, or, where the original head rejects those labels (MusicGen's take one row per codebook),
    the mean square of the logits, on both sides."""
    import torch

    ids = probe.ids(2, 7)
    losses, grads = [], []
    labels = probe.has_head
    for side, model in enumerate(probe.pair(fresh=True)):
        model.train()
        model.gradient_checkpointing_enable()
        with torch.enable_grad():
            out = None
            if labels:
                try:
                    out = model(input_ids=ids, labels=ids)
                except ValueError:
                    if side:  # only the original decides that the labels do not fit: the migrated must take them
                        raise
                    labels = False
            if out is None:
                out = model(input_ids=ids)
            loss = out.loss if labels and getattr(out, "loss", None) is not None else logits(out).square().mean()
            loss.backward()
        losses.append(loss.detach())
        grads.append({name: p.grad for name, p in model.named_parameters()})
    expect_same(losses[0], losses[1], "loss")
    expect_same(grads[0], grads[1], "grad")
    kind = "loss" if labels else "mean square of the logits"
    return f"{kind} {losses[0].item():.6f} and {len(grads[0])} parameter grads bit-identical"
