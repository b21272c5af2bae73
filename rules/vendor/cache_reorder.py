"""A Cache's key and value tensors reordered in place by a function of the model's own, on every release a migrated
model runs on. Written for cachemigrate."""


def reorder_cache_tensors(cache, reorder):
    """`cache` with `reorder` applied to every key and value tensor of every layer, in place, and given back (vendored
    by cachemigrate): an EncoderDecoderCache's self-attention and cross-attention caches each; `cache.layers[i].keys`
    / `.values` from transformers 4.54 on, `cache.key_cache[i]` / `cache.value_cache[i]` before. A layer not yet
    written (no tensor, or an empty one) is left as it is."""

    def written(tensor):
        return tensor is not None and hasattr(tensor, "numel") and tensor.numel() > 0

    parts = (cache,)
    if hasattr(cache, "cross_attention_cache"):
        parts = (cache.self_attention_cache, cache.cross_attention_cache)
    for part in parts:
        if hasattr(part, "layers"):
            for layer in part.layers:
                if written(getattr(layer, "keys", None)):
                    layer.keys, layer.values = reorder(layer.keys), reorder(layer.values)
            continue
        for index in range(len(part.key_cache)):
            if written(part.key_cache[index]):
                part.key_cache[index] = reorder(part.key_cache[index])
                part.value_cache[index] = reorder(part.value_cache[index])
    return cache
