"""Training paths."""

from __future__ import annotations

from ..compare import expect_same, logits
from .registry import check, needs_decoder_only, needs_gradient_checkpointing


@check(needs_decoder_only, needs_gradient_checkpointing, grad=True)
def gradient_checkpointing(probe) -> str:
    """Training step with gradient checkpointing: same loss and gradients, bit for bit."""
    import torch

    ids = probe.ids(2, 7)
    losses, grads = [], []
    for model in probe.pair(fresh=True):
        model.train()
        model.gradient_checkpointing_enable()
        with torch.enable_grad():
            out = model(input_ids=ids, labels=ids) if probe.has_head else model(input_ids=ids)
            loss = out.loss if getattr(out, "loss", None) is not None else logits(out).square().mean()
            loss.backward()
        losses.append(loss.detach())
        grads.append({name: p.grad for name, p in model.named_parameters()})
    expect_same(losses[0], losses[1], "loss")
    expect_same(grads[0], grads[1], "grad")
    return f"loss {losses[0].item():.6f} and {len(grads[0])} parameter grads bit-identical"
