"""The proof for a patch of a library class (rules CM620-CM629): the LIBRARY model runs with the ORIGINAL patch on
the old runtime and with the MIGRATED patch on the new one, from the same weights and inputs, and what it computes
is compared.

The worker runs in one runtime's interpreter (only torch, transformers and this file; no libcst), one of:

``record LIBRARY DIR PATCH``  on the runtime the patch was written for: builds the tiny causal LM of the library
    module ``LIBRARY`` (``transformers.models.gpt2.modeling_gpt2``: its ``*ForCausalLM`` / ``*LMHeadModel``, from
    its config class shrunk by :func:`cachemigrate.probe.tiny.tiny_config`) once PATCH is imported (the import
    patches a class, or sets one in the library module), calls the patch module's NAME on it with ``--apply NAME``
    (a function that swaps the patch's attention in), and saves its weights and what it computes (:func:`compute`)
    in DIR.
``replay LIBRARY DIR PATCH...``  on the new runtime: the same model, with the weights of ``record``, patched by
    each PATCH in turn (the migrated ones; the original too, to show what it does there), computes the same and
    compares with ``record``'s: the generated tokens exactly, the logits of the full forward and the scores of each
    generation step within ``--atol`` (:data:`ATOL`); the largest differences are reported.

Both print one JSON line (``replay``: a list, one result per PATCH). ``patched`` says what of the model ran the
patch's code (a patch that failed to apply would prove nothing).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
from pathlib import Path

PROMPT = (2, 5)  # [batch, length]
NEW_TOKENS = 6
ATOL = 1e-5  # the cross probe's (cachemigrate.probe.cross): the scores of a step differ in the last bit where a
# release computes the head on the last position only


def library_model(library: str):
    """(the causal-LM class of the library module, its module)."""
    from transformers import PreTrainedModel

    module = importlib.import_module(library)
    found = [
        value
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, PreTrainedModel)
        and value.__module__ == module.__name__
        and value.__name__.endswith(("ForCausalLM", "LMHeadModel"))
    ]
    if not found:
        raise LookupError(f"{library} defines no *ForCausalLM or *LMHeadModel class to run the patch in")
    return found[0], module


def build(library: str, seed: int):
    import torch

    from cachemigrate.probe.tiny import tiny_config

    model_class, _ = library_model(library)
    config = tiny_config(model_class.config_class, attn="eager")
    torch.manual_seed(seed)
    return model_class(config).eval(), config


def patched(library: str, patch, model) -> list[str]:
    """What of the model runs the patch's code: ``Class.method`` of the library module whose method is now a function
    of the patch module, and ``Class x n`` for the patch's classes swapped into the model (n modules)."""
    _, module = library_model(library)
    found = []
    for name, cls in vars(module).items():
        if isinstance(cls, type) and cls.__module__ == module.__name__:
            for attr, value in vars(cls).items():
                if getattr(value, "__module__", None) == patch.__name__:
                    found.append(f"{name}.{attr}")
    swapped = [type(m).__name__ for m in model.modules() if type(m).__module__ == patch.__name__]
    found.extend(f"{name} x {swapped.count(name)}" for name in sorted(set(swapped)))
    return found


def import_patch(path: str):
    """Import the patch module (a fresh module each time: importing it patches the class again, or sets its class
    in the library module, before the model is built)."""
    spec = importlib.util.spec_from_file_location("cachemigrate_patch_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def patched_model(path: str, library: str, seed: int, apply: str | None):
    """(the patch module, the tiny model built once it is imported, its config); with ``apply``, that function of the
    patch module is called on the model (it swaps the patch's attention into it)."""
    module = import_patch(path)
    model, config = build(library, seed)
    if apply:
        getattr(module, apply)(model)
    return module, model, config


def compute(model, config, seed: int) -> dict:
    """The full forward's logits, and greedy generation: tokens and each step's scores (the cache is reused at every
    step: a patch that drops or misplaces it changes them)."""
    import torch

    generator = torch.Generator().manual_seed(seed * 1000 + 7)
    input_ids = torch.randint(1, config.vocab_size, PROMPT, generator=generator)
    with torch.no_grad():
        logits = model(input_ids, use_cache=False).logits
        out = model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            num_beams=1,
            pad_token_id=config.pad_token_id,
            output_scores=True,
            return_dict_in_generate=True,
        )
    return {"logits": logits, "tokens": out.sequences, "scores": torch.stack(out.scores)}


def record(patch: str, library: str, folder: Path, seed: int, apply: str | None = None) -> dict:
    import torch
    import transformers

    module, model, config = patched_model(patch, library, seed, apply)
    torch.save(model.state_dict(), folder / "weights.pt")
    torch.save(compute(model, config, seed), folder / "reference.pt")
    return {"transformers": transformers.__version__, "patched": patched(library, module, model)}


def replay(patch: str, library: str, folder: Path, seed: int, atol: float, apply: str | None = None) -> dict:
    import torch
    import transformers

    module, model, config = patched_model(patch, library, seed, apply)
    missing, unexpected = model.load_state_dict(torch.load(folder / "weights.pt"), strict=False)
    result = {"transformers": transformers.__version__, "patched": patched(library, module, model)}
    result["weights"] = {"missing": list(missing), "unexpected": list(unexpected)}
    reference = torch.load(folder / "reference.pt")
    try:
        got = compute(model, config, seed)
    # the patch failing on this runtime is the finding (the original patch on a new runtime), not a crash
    except Exception as exc:  # noqa: BLE001
        return {**result, "ok": False, "detail": f"{type(exc).__name__}: {exc}"}
    checks = {}
    for name in ("logits", "tokens", "scores"):
        a, b = reference[name], got[name]
        if a.shape != b.shape:
            checks[name] = f"shape {tuple(a.shape)} against {tuple(b.shape)}"
            continue
        diff = (a.float() - b.float()).abs().max().item() if a.numel() else 0.0
        exact = name == "tokens"
        checks[name] = None if (torch.equal(a, b) if exact else diff <= atol) else f"largest difference {diff}"
        result[f"{name}_max_abs_diff"] = diff
    failed = {name: why for name, why in checks.items() if why}
    detail = "; ".join(f"{k}: {v}" for k, v in failed.items()) or None
    return {**result, "ok": not failed, "detail": detail, "checks": checks}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cachemigrate.probe.patches")
    parser.add_argument("mode", choices=("record", "replay"))
    parser.add_argument("library")
    parser.add_argument("folder", type=Path)
    parser.add_argument("patches", nargs="+")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--atol", type=float, default=ATOL)
    parser.add_argument(
        "--apply", help="a function of the patch module to call on the model (it swaps in its attention)"
    )
    args = parser.parse_args(argv)
    if args.mode == "record":
        result = record(args.patches[0], args.library, args.folder, args.seed, args.apply)
    else:
        result = [
            {**replay(p, args.library, args.folder, args.seed, args.atol, args.apply), "patch": p}
            for p in args.patches
        ]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
