"""The outputs of a library model with the Cache in them given back as a legacy tuple, for a head whose caller
handed it a tuple or no past (the head's tuple path), read the same way on every release a migrated head runs on.
Written for cachemigrate."""

from transformers.cache_utils import Cache


def legacy_past_in_outputs(outputs):
    """`outputs` (a ModelOutput or a tuple) with each Cache in it replaced by a tuple of (keys, values) per layer
    (vendored by cachemigrate: read off `cache.layers` from transformers 4.54 on, through `to_legacy_cache()`
    before)."""

    def legacy(cache):
        if hasattr(cache, "layers"):
            return tuple((layer.keys, layer.values) for layer in cache.layers)
        return cache.to_legacy_cache()

    if isinstance(outputs, tuple):
        return tuple(legacy(item) if isinstance(item, Cache) else item for item in outputs)
    for key, value in list(outputs.items()):
        if isinstance(value, Cache):
            outputs[key] = legacy(value)
    return outputs
