"""Calling conventions that third-party code relies on: positional arguments, and torch.jit.trace with tuples."""

from __future__ import annotations

import inspect

from ..compare import CheckFailed, CheckSkipped, clone, expect_same, one_line, traced_against_eager
from ..context import PROMPT_LEN
from .registry import check, needs_decoder_only


def _positional_args(function, values: dict) -> list:
    """Positional arguments for ``function`` (a bound forward) carrying ``values``; gaps get the defaults."""
    params = list(inspect.signature(function).parameters.values())
    named = [i for i, p in enumerate(params) if p.name in values]
    if not named:
        raise CheckSkipped(f"the forward takes ({', '.join(str(p) for p in params)}): no named parameter to fill")
    last = max(named)
    args = []
    for param in params[: last + 1]:
        if param.kind not in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            raise CheckSkipped(f"{param.name!r} cannot be passed positionally in the original signature")
        default = None if param.default is param.empty else param.default
        args.append(values.get(param.name, default))
    return args


@check(needs_decoder_only)
def positional_call(probe) -> str:
    """Positional calls in the ORIGINAL signature order: (input_ids, past_key_values, attention_mask)."""
    import torch

    original, migrated = probe.pair()
    prompt, steps = probe.prompt_and_steps()
    given = probe.original_past(original, prompt)
    values = {"input_ids": steps[0], "attention_mask": torch.ones(2, PROMPT_LEN + 1, dtype=torch.long)}
    targets = [("base model", original.base_model, migrated.base_model)]
    if probe.has_head:
        targets.append(("head", original, migrated))
    done, skipped = [], []
    for what, model_o, model_m in targets:
        try:
            args = _positional_args(model_o.forward, {**values, "past_key_values": given})
        except CheckSkipped as exc:  # e.g. a base model wrapper whose forward is (*args, **kwargs)
            skipped.append(f"{what}: {exc}")
            continue
        try:
            out_o = model_o(*clone(args))
        except Exception as exc:  # noqa: BLE001 - IDEFICS's base model needs images the probe gives its head only
            skipped.append(f"{what}: the original raises {one_line(exc)}")
            continue
        out_m = model_m(*clone(args))
        expect_same(out_o, out_m, f"{what} out")
        done.append(f"{what} called with {len(args)} positional args")
    if not done:
        raise CheckSkipped("; ".join(skipped))
    return "; ".join(done) + ": identical" + "".join(f"; {s} (skipped)" for s in skipped)


@check(needs_decoder_only)
def jit_trace_tuple(probe) -> str:
    """torch.jit.trace with a tuple past; the traced migrated model matches the eager original on new inputs."""
    import torch

    original, migrated = probe.pair(torchscript=True, fresh=True)
    prompt, steps = probe.prompt_and_steps()
    example = {"input_ids": steps[0], "past_key_values": probe.original_past(original, prompt)}

    def trace(model):
        return torch.jit.trace(model, example_kwarg_inputs=clone(example), strict=False, check_trace=False)

    try:
        traced_original = trace(original)
    except Exception as exc:  # noqa: BLE001
        raise CheckSkipped(f"the original cannot be traced: {one_line(exc)}") from exc
    try:
        traced = trace(migrated)
    except Exception as exc:  # noqa: BLE001
        raise CheckFailed(f"tracing the migrated model failed: {one_line(exc)}") from exc
    new_prompt, new_steps = probe.prompt_and_steps(salt=7)
    new = {"input_ids": new_steps[0], "past_key_values": probe.original_past(original, new_prompt)}
    eager, got = original(**clone(new)), traced(**clone(new))
    verdict = traced_against_eager(eager, got, lambda: traced_original(**clone(new)))
    return verdict or "traced migrated model equals eager original on new inputs"
