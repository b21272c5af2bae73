"""Weights both models can share: every parameter and buffer finite and set from the seed.

A file may leave a tensor uninitialised (``nn.Parameter(torch.empty(n))`` that its ``_init_weights`` never
reaches): it then holds whatever the allocator returned, NaN or garbage, and both models compute NaN from it, so
that no comparison can say anything. :func:`initialise` refills such tensors from the seed before the state_dict is
shared; every other tensor keeps what the model's own initialisation gave it.
"""

from __future__ import annotations

GARBAGE = 1e8  # no weight a model initialises itself comes near this; an uninitialised one often does
SCALE = 0.02  # the std of the refilled values (the usual initializer_range)


def _unset(tensor, parameter: bool) -> bool:
    """True for a floating tensor holding NaN, or (a parameter) any non-finite or garbage value. A buffer may hold
    -inf or -1e9 on purpose (an additive causal mask); NaN never."""
    import torch

    if not tensor.is_floating_point() or tensor.numel() == 0:
        return False
    if torch.isnan(tensor).any():
        return True
    return parameter and not (torch.isfinite(tensor).all() and tensor.abs().max() < GARBAGE)


def initialise(model, seed: int) -> list[str]:
    """Refill every parameter and buffer of ``model`` left uninitialised, from ``seed`` and its name; the names
    refilled."""
    import zlib

    import torch

    refilled = []
    tensors = [(n, t, True) for n, t in model.named_parameters()] + [(n, t, False) for n, t in model.named_buffers()]
    for name, tensor, parameter in tensors:
        if not _unset(tensor, parameter):
            continue
        # seeded by name: the same values for the same tensor in either file, whatever else either holds
        generator = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
        values = torch.randn(tensor.shape, generator=generator, dtype=torch.float32) * SCALE
        with torch.no_grad():
            tensor.copy_(values.to(tensor.dtype))
        refilled.append(name)
    return refilled
