"""Run by tests/test_dict_parts_runtimes.py under a transformers release: ``python dict_parts_driver.py BEFORE
AFTER``. The toy translator of ``fixtures/<era>/CM640`` before and after its migration, with the same weights, decodes
step by step three ways: the original on its lists of dicts, the migrated file on lists of dicts (given back as
such) and on one EncoderDecoderCache (given back as the same object), reordering the beams after every step with
each file's own reorder. Prints one JSON line: the largest logit difference, the parts' key lengths and what
``is_updated`` says; exits non-zero on any other difference."""

import importlib.util
import json
import sys

import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(before: str, after: str) -> None:
    torch.manual_seed(0)
    original = load(before, "original").Translator().eval()
    migrated = load(after, "migrated").Translator().eval()
    migrated.load_state_dict(original.state_dict())
    ids, memory = torch.randint(0, 32, (2, 6)), torch.randn(2, 5, 16)
    cache, order, worst = EncoderDecoderCache(DynamicCache(), DynamicCache()), torch.tensor([1, 0]), 0.0
    past_o = past_m = None
    with torch.no_grad():
        for step in range(ids.shape[1]):
            token = ids[:, step : step + 1]
            logits_o, past_o = original(token, memory, past_key_values=past_o, use_cache=True)
            logits_m, past_m = migrated(token, memory, past_key_values=past_m, use_cache=True)
            logits_c, given = migrated(token, memory, past_key_values=cache, use_cache=True)
            assert given is cache, type(given)
            assert isinstance(past_m, list) and all(isinstance(layer, dict) for layer in past_m), type(past_m)
            for layer_o, layer_m in zip(past_o, past_m):
                assert list(layer_o) == list(layer_m)
                for part in layer_o:
                    for field, tensor in layer_o[part].items():
                        assert (tensor is None) == (layer_m[part][field] is None), (part, field)
                        if tensor is not None:
                            assert torch.equal(tensor, layer_m[part][field]), (part, field)
            worst = max(worst, (logits_o - logits_m).abs().max().item(), (logits_o - logits_c).abs().max().item())
            past_o, past_m = original._reorder_cache(past_o, order), migrated._reorder_cache(past_m, order)
            assert migrated._reorder_cache(cache, order) is cache
    print(
        json.dumps(
            {
                "max_diff": worst,
                "self_length": cache.self_attention_cache.get_seq_length(),
                "cross_length": cache.cross_attention_cache.get_seq_length(),
                "is_updated": {str(k): v for k, v in cache.is_updated.items()},
            }
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:3])
