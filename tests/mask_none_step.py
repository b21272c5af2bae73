"""Run by tests/test_era_mask_none.py under each runtime's interpreter (only torch, transformers and this checkout on
PYTHONPATH): for each migrated modeling file named, build its tiny causal-LM head, and print as JSON (one object per
file) the largest difference between the logits of cached steps fed with ``attention_mask=None`` and the no-cache
logits of the whole sequence, for the past it returns itself (a tuple or a Cache) and for a DynamicCache passed in.
One interpreter start for all the files of a runtime."""

import json
import sys
from pathlib import Path

import torch
from transformers.cache_utils import DynamicCache

from cachemigrate.probe.compare import logits, past
from cachemigrate.probe.loading import load_modeling_module, packages_for
from cachemigrate.probe.models import build_original, discover
from cachemigrate.probe.runtime import installed_version
from cachemigrate.probe.tiny import tiny_config

PROMPT, STEPS = 5, 3


def main(path: Path, index: int) -> dict:
    module = load_modeling_module(path, package=packages_for([path], None)[0], alias=f"_cm_mask_none_{index}")
    classes = discover(module)
    model = build_original(classes, tiny_config(classes.config_class), seed=0)
    tokens = torch.randint(1, 90, (2, PROMPT + STEPS), generator=torch.Generator().manual_seed(3))
    found = {"transformers": installed_version()}
    with torch.no_grad():
        whole = logits(model(input_ids=tokens, use_cache=False))
        for start in ("returned", "DynamicCache"):
            given = DynamicCache() if start == "DynamicCache" else None
            out = model(input_ids=tokens[:, :PROMPT], past_key_values=given, use_cache=True, attention_mask=None)
            diffs = [(logits(out) - whole[:, :PROMPT]).abs().max().item()]
            for i in range(PROMPT, PROMPT + STEPS):
                given = past(out) if start == "returned" else given
                out = model(input_ids=tokens[:, i : i + 1], past_key_values=given, use_cache=True, attention_mask=None)
                diffs.append((logits(out)[:, -1] - whole[:, i]).abs().max().item())
            found[start] = {"past": type(past(out)).__name__, "max_abs_diff": max(diffs)}
    return found


if __name__ == "__main__":
    print(json.dumps([main(Path(name).resolve(), i) for i, name in enumerate(sys.argv[1:])]))
