"""The two halves of the cross-version probe, each run in its own interpreter: ``python -m cachemigrate.probe.worker``.

``record ORIGINAL --dir D``: in the runtime where the original worked (e.g. transformers 4.51.3), build the tiny
model, and write ``D/reference.pt``: its state_dict, its config, the inputs, and what the original returned for
them (logits, legacy tuple pasts, greedy and beam tokens).

``replay MIGRATED --dir D``: in the target runtime, build the migrated model from the same config with the same
state_dict, feed it the same inputs, compare (:mod:`.cross_checks`) and write ``D/result.json``.

Only torch, transformers and this package (put on ``PYTHONPATH`` by :mod:`.cross`) are needed in either runtime.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
import traceback
from pathlib import Path

from .compare import one_line
from .context import PROMPT_LEN, STEPS
from .runtime import BEAMS, Stepper, generate, installed_version, logits_of, past_of, quiet

REFERENCE, RESULT = "reference.pt", "result.json"


def _load(path: Path, package: str | None, alias: str):
    from .loading import load_modeling_module, packages_for

    return load_modeling_module(path, package=packages_for([path], package)[0], alias=alias)


def _inputs(vocab: int, seed: int) -> dict:
    """Token ids in [1, vocab - 1) (0 is the pad id, vocab - 1 is ImageGPT's start token)."""
    import torch

    generator = torch.Generator().manual_seed(seed * 1000 + 7)
    full = torch.randint(1, vocab - 1, (2, PROMPT_LEN + STEPS), generator=generator)
    padded = torch.randint(1, vocab - 1, (2, 7), generator=generator)
    mask = torch.ones_like(padded)
    mask[0, :3] = 0
    padded[0, :3] = 0
    return {"full": full, "padded": padded, "padded_mask": mask}


def _mask(batch: int, length: int):
    import torch

    return torch.ones(batch, length, dtype=torch.long)


def _conventions(model, inputs) -> dict:
    """How the original is stepped: ``mask`` when its cached steps need an attention mask (all ones, over the
    cached and the new positions), ``refeeds`` when it is handed the whole sequence on every cached step
    (:mod:`.steps`). The migrated model is then stepped the same way."""
    import torch

    from .steps import refeeds_whole_sequence

    prompt, step = inputs["full"][:, :PROMPT_LEN], inputs["full"][:, PROMPT_LEN : PROMPT_LEN + 1]
    failure = None
    for mask in (False, True):
        extra = (lambda n: {"attention_mask": _mask(prompt.shape[0], n)}) if mask else (lambda n: {})
        try:
            with torch.no_grad():
                given = past_of(model(input_ids=prompt, use_cache=True, **extra(PROMPT_LEN)))
                model(input_ids=step, past_key_values=given, use_cache=True, **extra(PROMPT_LEN + 1))
            return {"mask": mask, "refeeds": False}
        except Exception as exc:  # noqa: BLE001 - try the next convention
            failure = failure or exc
    if refeeds_whole_sequence(model, inputs["full"][:, : PROMPT_LEN + 1]):
        return {"mask": False, "refeeds": True}
    raise failure


def _generated(model, *args, **kwargs):
    """The tokens of :func:`.runtime.generate`, or ``{"error": ...}`` when the original's generate() raises (the
    migrated side must then raise the same to be called equivalent)."""
    try:
        return generate(model, *args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - recorded, and compared on the migrated side
        return {"error": one_line(exc)}


def record(path: Path, folder: Path, package: str | None, seed: int, settings: dict | None = None) -> dict:
    """Run the original and write what it did to ``folder/reference.pt``; returns the metadata. A module whose
    models all need encoder states (an encoder-decoder head alone) records only its decoders with cross-attention
    (:mod:`.cross_seq2seq`), which every module that has them records as well."""
    import torch

    from . import cross_seq2seq
    from .models import discover

    module = _load(path, package, "_cm_xoriginal")
    classes = discover(module)
    meta = {"transformers": installed_version(), "file": str(path), "seed": seed, "decoder_only": classes.decoder_only}
    reference = {"meta": meta}
    if classes.decoder_only:
        reference.update(_record_decoder(module, classes, seed, settings or {}))
        meta.update(reference.pop("meta_part"))
    else:
        meta.update(model_class=None, has_head=False)
    reference["cross"] = cross_seq2seq.record(classes, seed, settings)
    torch.save(reference, folder / REFERENCE)
    return meta


def _record_decoder(module, classes, seed: int, settings: dict) -> dict:
    """The decoder-only part of the reference: config, state_dict, inputs and the original's outputs."""
    import torch

    from .runtime import generation_head
    from .seq2seq import decoder_changes
    from .tiny import tiny_config, vocab_of
    from .weights import initialise

    head = classes.head_class or generation_head(module, classes.base_class)
    config = tiny_config(classes.config_class, settings=settings)
    for name, value in decoder_changes(classes).items():  # a Bert-style decoder keeps no cache unless told it is one
        if name not in settings:  # as the same-version probe does (probe/context.py); the settings asked for win
            setattr(config, name, value)
    torch.manual_seed(seed)
    model = (head or classes.base_class)(copy.deepcopy(config)).eval()
    initialise(model, seed)  # no tensor left as torch.empty: NaN on both sides compares nothing
    inputs = _inputs(vocab_of(config), seed)
    how = _conventions(model, inputs)
    step = Stepper(how)
    prompt = inputs["full"][:, :PROMPT_LEN]
    outputs: dict = {}
    with torch.no_grad():
        outputs["full_logits"] = logits_of(model(input_ids=inputs["full"], use_cache=False))
        out = model(**step.call(inputs["full"], None), use_cache=True)
        outputs["prompt_logits"], outputs["prompt_past"] = logits_of(out), past_of(out)
        given, outputs["step_logits"] = outputs["prompt_past"], []
        for i in range(STEPS):
            out = model(**step.call(inputs["full"], i), past_key_values=given, use_cache=True)
            outputs["step_logits"].append(logits_of(out))
            given = past_of(out)
            if i == 0:
                outputs["step0_past"] = given
        try:  # the original's own limit (4.51.3's Persimmon reads a tuple as a Cache unless `use_cache`): no check
            out = model(**step.call(inputs["full"], 0), past_key_values=outputs["prompt_past"], use_cache=False)
            outputs["no_cache_step_logits"], outputs["no_cache_step_past"] = logits_of(out), past_of(out)
        except Exception as exc:  # noqa: BLE001 - recorded; the cross check skips saying so
            outputs["no_cache_step_error"] = one_line(exc)
        outputs["tuple_out"] = model(**step.call(inputs["full"], None), use_cache=True, return_dict=False)
        keep = inputs["padded_mask"].bool()
        padded = model(input_ids=inputs["padded"], attention_mask=inputs["padded_mask"], use_cache=False)
        outputs["padded_logits"] = logits_of(padded)[keep]
        if head is not None:
            outputs["greedy"] = _generated(model, prompt)
            outputs["beam"] = _generated(model, prompt, num_beams=BEAMS)
            outputs["padded_greedy"] = _generated(model, inputs["padded"], inputs["padded_mask"])
    meta = {
        "config_class": classes.config_class.__name__,
        "model_class": (head or classes.base_class).__name__,
        "has_head": head is not None,
        "attn_implementation": config._attn_implementation,
        **how,
    }
    return {
        "meta_part": meta,
        "config": config.to_dict(),
        "state_dict": model.state_dict(),
        "inputs": inputs,
        "outputs": outputs,
    }


def replay(path: Path, out: Path, package: str | None, rtol: float, atol: float) -> dict:
    """Run the migrated file against ``out/reference.pt``; returns the result (also written to ``result.json``)."""
    import torch

    from .cross_checks import CROSS_CHECKS, Replay, encoder_decoder_only, run_checks
    from .cross_seq2seq import replay_checks

    reference = torch.load(out / REFERENCE, weights_only=False)
    meta = reference["meta"]
    started = time.perf_counter()
    try:
        module = _load(path, package, "_cm_xmigrated")
        model_class = getattr(module, meta["model_class"]) if meta["model_class"] else None
    except Exception as exc:  # noqa: BLE001 - reported as the set-up result
        results = [_setup_result(f"the migrated file does not import here: {one_line(exc)}", exc, started)]
        return _finish(out, meta, results)
    context = Replay(model_class, reference, rtol=rtol, atol=atol)
    checks = CROSS_CHECKS if meta["decoder_only"] else [encoder_decoder_only(c) for c in CROSS_CHECKS]
    if meta["decoder_only"]:
        try:
            context.build()
        except Exception as exc:  # noqa: BLE001
            results = [_setup_result(f"the migrated model cannot be built here: {one_line(exc)}", exc, started)]
            return _finish(out, meta, results)
    checks = [*checks, *replay_checks(module, reference.get("cross", []))]
    return _finish(out, meta, run_checks(context, checks), context)


def _setup_result(detail: str, exc: BaseException, started: float) -> dict:
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    suffix = f" (at {Path(where.filename).name}:{where.lineno})" if where else ""
    return {"name": "setup", "status": "error", "detail": detail + suffix, "seconds": time.perf_counter() - started}


def _finish(out: Path, meta: dict, results: list[dict], context=None) -> dict:
    result = {
        "original_transformers": meta["transformers"],
        "migrated_transformers": installed_version(),
        "model_class": meta["model_class"],
        "tolerance": context.tolerance_text() if context else None,
        "max_abs_diff": context.max_diff if context else None,
        "nan_seen": context.nan_seen if context else False,
        "results": results,
    }
    (out / RESULT).write_text(json.dumps(result, indent=1))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cachemigrate.probe.worker")
    parser.add_argument("mode", choices=("record", "replay"))
    parser.add_argument("file", type=Path)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--package", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--atol", type=float, default=1e-5)
    parser.add_argument("--settings", default="{}", help="config values set over the tiny ones, as JSON")
    args = parser.parse_args(argv)
    with quiet():
        if args.mode == "record":
            meta = record(args.file.resolve(), args.dir, args.package, args.seed, json.loads(args.settings))
            print(json.dumps(meta))
        else:
            result = replay(args.file.resolve(), args.dir, args.package, args.rtol, args.atol)
            print(json.dumps({k: v for k, v in result.items() if k != "results"}))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
