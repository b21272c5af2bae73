"""The proof for code that edits a cache outside a model (rules CM500-CM504): each call of a helper runs in its
ORIGINAL form on a tuple past and in its MIGRATED form on a ``DynamicCache`` of the same tensors, in one process,
and every tensor of the two results is compared bit for bit (``torch.equal``, with dtype and shape). The migrated
helper is also run on the tuple: its tuple path must give the original's result.

A call is ``{"function": name, "args": [...]}`` where an argument is a number, ``"PAST"`` (the past: a tuple of
(key, value) per layer, or the cache) or ``{"tensor": [...]}``. Standalone on purpose (only torch and transformers):
``python edits.py JOBS.json`` (a list of ``{original, migrated, calls, label}``) runs it in another runtime's
interpreter and prints the results as JSON.
"""

from __future__ import annotations

import importlib.util
import json
import sys

LAYERS, SHAPE = 3, (2, 2, 7, 4)  # [batch, heads, seq, head_dim]


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_past():
    import torch

    generator = torch.Generator().manual_seed(0)
    return tuple(
        (torch.randn(SHAPE, generator=generator), torch.randn(SHAPE, generator=generator)) for _ in range(LAYERS)
    )


def make_cache(past):
    from transformers import DynamicCache

    copied = tuple((k.clone(), v.clone()) for k, v in past)
    if hasattr(DynamicCache, "from_legacy_cache"):
        return DynamicCache.from_legacy_cache(copied)
    return DynamicCache(copied)  # transformers 5: the converters are gone


def cache_tensors(cache) -> list:
    """The (keys, values) of each layer of a Cache, on any release."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))


def _flat(value) -> list:
    """Every leaf of a result, a Cache as its per-layer tensors (a past and a Cache of it flatten alike)."""
    if type(value).__name__.endswith("Cache"):
        return [t for pair in cache_tensors(value) for t in pair]
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _flat(item)]
    return [value]


def same(left, right) -> str | None:
    """None when every leaf agrees bit for bit (a Cache and a tuple past of the same tensors agree), else why."""
    import torch

    a, b = _flat(left), _flat(right)
    ta, tb = [x for x in a if isinstance(x, torch.Tensor)], [x for x in b if isinstance(x, torch.Tensor)]
    if len(ta) != len(tb):
        return f"{len(ta)} tensors against {len(tb)}"
    for index, (x, y) in enumerate(zip(ta, tb)):
        if x.dtype != y.dtype or x.shape != y.shape or not torch.equal(x, y):
            return f"tensor {index}: {tuple(x.shape)} {x.dtype} against {tuple(y.shape)} {y.dtype}, or values differ"
    others = [x for x in a if not isinstance(x, torch.Tensor)], [x for x in b if not isinstance(x, torch.Tensor)]
    if others[0] != others[1]:
        return f"values {others[0]} against {others[1]}"
    return None


def _args(spec: list, past) -> list:
    import torch

    return [past if a == "PAST" else torch.tensor(a["tensor"]) if isinstance(a, dict) else a for a in spec]


def check(original_path: str, migrated_path: str, calls: list[dict]) -> list[dict]:
    """One result per call: ``ok``, and ``detail`` when it is not."""
    import transformers

    original = load(original_path, "cachemigrate_edits_original")
    migrated = load(migrated_path, "cachemigrate_edits_migrated")
    results = []
    for call in calls:
        name = call["function"]
        expected = getattr(original, name)(*_args(call["args"], make_past()))
        cache = make_cache(make_past())
        try:
            got = getattr(migrated, name)(*_args(call["args"], cache))
            on_tuple = getattr(migrated, name)(*_args(call["args"], make_past()))
        # the migrated helper failing on this runtime is a finding, not a crash of the check
        except Exception as exc:  # noqa: BLE001
            results.append({"call": call, "ok": False, "detail": f"{type(exc).__name__}: {exc}"})
            continue
        why = same(expected, got) or (f"tuple path: {same(expected, on_tuple)}" if same(expected, on_tuple) else None)
        if why is None and type(got).__name__.endswith("Cache") and got is not cache:
            why = "the migrated helper gave back another cache than the one it was handed"
        results.append({"call": call, "ok": why is None, "detail": why, "transformers": transformers.__version__})
    return results


def run_jobs(jobs: list[dict]) -> list[dict]:
    """:func:`check` for each job (``original``, ``migrated``, ``calls``, ``label``), its results labelled."""
    return [
        {**result, "label": job["label"]}
        for job in jobs
        for result in check(job["original"], job["migrated"], job["calls"])
    ]


if __name__ == "__main__":
    with open(sys.argv[1]) as handle:
        print(json.dumps(run_jobs(json.load(handle))))
