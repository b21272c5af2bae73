"""Comparing outputs: tensors bit for bit, nested outputs by structure, and small helpers on model outputs."""

from __future__ import annotations


class CheckFailed(Exception):
    """Raised by a check when the migrated model behaves differently."""


class CheckSkipped(Exception):
    """Raised by a check that does not apply to this model."""


class CheckInconclusive(Exception):
    """Raised when what was to be compared cannot be: both models returned NaN at the same positions (and agree
    elsewhere). Neither agreement nor a divergence: the check is reported as a set-up error saying so."""


def nan_verdict(a, b, what: str) -> str | None:
    """None when neither float tensor holds NaN; else why they cannot be called equal: NaN at different positions
    (a difference), or at the same positions in both (:class:`CheckInconclusive` is raised)."""
    import torch

    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    if not (nan_a.any() or nan_b.any()):
        return None
    if not torch.equal(nan_a, nan_b):
        return f"NaN at {int(nan_b.sum())} of {b.numel()} positions, the original's at {int(nan_a.sum())}"
    raise CheckInconclusive(
        f"{what}: both models returned NaN at the same {int(nan_a.sum())} of {a.numel()} positions (and agree "
        "elsewhere): nothing to compare there, neither agreement nor a divergence"
    )


def kind(value) -> str:
    """``None``, ``Tensor`` or the type name."""
    import torch

    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        return "Tensor"
    return type(value).__name__


def tensor_diff(a, b, where: str = "out") -> str | None:
    """None when ``a`` and ``b`` are bit-identical, else a one-line description of the difference; NaN in both at
    the same positions raises :class:`CheckInconclusive`."""
    import torch

    if a.shape != b.shape:
        return f"shape {tuple(a.shape)} vs {tuple(b.shape)}"
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} vs {b.dtype}"
    if torch.equal(a, b):
        return None
    if a.is_floating_point():
        both_nan = torch.isnan(a) & torch.isnan(b)
        if not torch.equal(a[~both_nan], b[~both_nan]):
            return f"max abs diff {(a.double() - b.double()).abs().nan_to_num(float('inf')).max().item():.3e}"
        return nan_verdict(a, b, where)
    return f"{int((a != b).sum())} of {a.numel()} elements differ"


def structure_diff(a, b, where: str = "out") -> str | None:
    """Compare two nested outputs (tensors, tuples, lists, ModelOutputs/dicts) by structure and value."""
    import torch

    if kind(a) != kind(b) and not (isinstance(a, dict) and isinstance(b, dict)):
        return f"{where}: {kind(a)} vs {kind(b)}"
    if isinstance(a, torch.Tensor):
        diff = tensor_diff(a, b, where)
        return f"{where}: {diff}" if diff else None
    if isinstance(a, dict):
        if list(a.keys()) != list(b.keys()):
            return f"{where}: keys {list(a.keys())} vs {list(b.keys())}"
        items = [(f"{where}.{k}", a[k], b[k]) for k in a]
    elif isinstance(a, (tuple, list)):
        if len(a) != len(b):
            return f"{where}: length {len(a)} vs {len(b)}"
        items = [(f"{where}[{i}]", x, y) for i, (x, y) in enumerate(zip(a, b))]
    else:
        return None if a == b else f"{where}: {a!r} vs {b!r}"
    for sub_where, x, y in items:
        diff = structure_diff(x, y, sub_where)
        if diff:
            return diff
    return None


def expect_same(a, b, what: str) -> None:
    """Raise :class:`CheckFailed` describing the first difference between ``a`` and ``b``."""
    diff = structure_diff(a, b, what)
    if diff:
        raise CheckFailed(diff)


def logits(output):
    """Logits of a head, or the last hidden state of a base model; works on ModelOutputs and tuples."""
    if isinstance(output, tuple):
        return output[0]
    found = getattr(output, "logits", None)
    return found if found is not None else output.last_hidden_state


def past(output):
    """The past a model returned (ModelOutput or ``return_dict=False`` tuple). In a tuple it follows the logits or
    last hidden state, and the pooled output that a base model with a pooler returns next (one vector per
    sequence: Bert's ``(sequence_output, pooled_output, past_key_values, ...)``)."""
    import torch

    if not isinstance(output, tuple):
        return getattr(output, "past_key_values", None)
    rest = list(output[1:])
    if len(rest) > 1 and isinstance(rest[0], torch.Tensor) and rest[0].dim() == 2:
        rest.pop(0)
    return rest[0] if rest else None


def clone(value):
    """Copy of a nested tuple/list of tensors (e.g. a legacy past), so that neither model sees the other's tensors."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(clone(v) for v in value)
    if isinstance(value, dict):  # a past kept as dicts of parts (fairseq style)
        return {key: clone(v) for key, v in value.items()}
    return value


def past_layers(legacy) -> list:
    """A legacy past's layers as tuples of tensors: a layer kept as a dict of parts (fairseq style) gives its parts'
    tensors in order (the self part's keys and values, then the cross part's: the encoder-decoder family's
    4-tuple), leaving out what a part keeps that is not a tensor; a tuple layer is as it is."""
    import torch

    def tensors(value):
        if isinstance(value, torch.Tensor):
            return [value]
        if isinstance(value, dict):
            return [t for v in value.values() for t in tensors(v)]
        return []

    return [tuple(tensors(layer)) if isinstance(layer, dict) else layer for layer in legacy]


def pairs_of_cache_layout(legacy) -> bool:
    """Every layer's past is a (key, value) pair of 4-D tensors of one shape, what a DynamicCache is built from (not
    BLOOM's 3-D keys with batch and heads merged, nor a fused key-value tensor)."""
    import torch

    def pair(layer) -> bool:
        if not isinstance(layer, (tuple, list)) or len(layer) != 2:
            return False
        key, value = layer
        return (
            isinstance(key, torch.Tensor)
            and isinstance(value, torch.Tensor)
            and key.dim() == 4
            and key.shape == value.shape
        )

    return isinstance(legacy, (tuple, list)) and len(legacy) > 0 and all(pair(layer) for layer in legacy)


def layout(value) -> str:
    """Short description of a nested output, e.g. ``tuple[Tensor, tuple[2]]``."""
    if isinstance(value, (tuple, list)):
        inner = ", ".join(kind(v) if not isinstance(v, (tuple, list)) else f"{kind(v)}[{len(v)}]" for v in value)
        return f"{kind(value)}[{inner}]"
    return kind(value)


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def traced_against_eager(eager, got, traced_original) -> str | None:
    """None when the traced migrated model's output ``got`` equals the eager original's ``eager``. Some originals
    compute differently once traced (ImageGPT's torch_float scale is int() in eager and a float tensor under
    tracing): then the migration is faithful if it traces to what the original traces to (``traced_original()``,
    run only then), and the verdict says so. Else CheckFailed with the difference."""
    diff = structure_diff(eager, got, "traced out")
    if diff is None:
        return None
    reference = traced_original()
    drift = structure_diff(eager, reference, "traced original")
    if drift and structure_diff(reference, got) is None:
        return f"traced migrated equals traced original; tracing changes the original itself ({drift})"
    raise CheckFailed(diff)
