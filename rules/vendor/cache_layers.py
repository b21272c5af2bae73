"""One layer's tensors of a transformers Cache, read and replaced the same way on every release a portable file
runs on: `cache.layers[i].keys` / `.values` from 4.54 on (5.x has nothing else), `cache.key_cache[i]` /
`value_cache[i]` before. Written for cachemigrate."""


def cache_layer_keys(cache, layer_idx):
    """The keys one layer of `cache` holds (vendored by cachemigrate: `cache.layers[i].keys` on transformers 4.54
    and later, `cache.key_cache[i]` before)."""
    if hasattr(cache, "layers"):
        return cache.layers[layer_idx].keys
    return cache.key_cache[layer_idx]


def cache_layer_values(cache, layer_idx):
    """The values one layer of `cache` holds (vendored by cachemigrate: `cache.layers[i].values` on transformers
    4.54 and later, `cache.value_cache[i]` before)."""
    if hasattr(cache, "layers"):
        return cache.layers[layer_idx].values
    return cache.value_cache[layer_idx]


def replace_cache_layer(cache, layer_idx, keys, values):
    """Replace what one layer of `cache` holds by `keys` and `values` (vendored by cachemigrate)."""
    if hasattr(cache, "layers"):
        cache.layers[layer_idx].keys = keys
        cache.layers[layer_idx].values = values
    else:
        cache.key_cache[layer_idx] = keys
        cache.value_cache[layer_idx] = values


def cache_layer_pairs(cache):
    """Each layer's (keys, values) of `cache`, a Cache or a legacy tuple of pairs (vendored by cachemigrate: iterating
    a Cache yields 3-tuples on transformers 5, and a Cache has no `layers` before 4.54); a tuple is given back as it
    is."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    if hasattr(cache, "key_cache"):
        return list(zip(cache.key_cache, cache.value_cache))
    return cache
