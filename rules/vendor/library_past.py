"""The outputs of a library model with the Cache in them given back as a legacy tuple, for a head whose caller
handed it a tuple or no past (the head's tuple path), read the same way on every release a migrated head runs on.
Written for cachemigrate."""

from transformers.cache_utils import Cache, EncoderDecoderCache


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


def stack_past_as_handed(outputs, legacy, use_cache):
    """`outputs` (a ModelOutput or a tuple) of a library model's stack of layers with the Cache in them given back the
    way the head's caller handed the past (vendored by cachemigrate). `legacy` (a tuple or no past was handed): a tuple
    per layer of its (keys, values), followed by the cross-attention's where the stack wrote them, as a tuple-era stack
    gave back; none at all where `use_cache` is off (4.57's stacks give back the Cache they were handed even then). Otherwise the head wrapped the self-attention Cache it was handed for the stack's cross-attention, and
    that Cache goes back."""

    def layers(cache):
        if hasattr(cache, "layers"):
            pairs = [(layer.keys, layer.values) for layer in cache.layers]
        else:
            pairs = [tuple(layer) for layer in cache.to_legacy_cache()]
        return [pair for pair in pairs if pair[0] is not None and pair[0].numel() > 0]

    def back(cache):
        if not legacy:
            return cache.self_attention_cache
        if not use_cache:
            return None
        if not hasattr(cache, "self_attention_cache"):
            return tuple(layers(cache))
        cross = layers(cache.cross_attention_cache)
        own = layers(cache.self_attention_cache)
        return tuple(pair + cross[index] if index < len(cross) else pair for index, pair in enumerate(own))

    if isinstance(outputs, tuple):
        given = [back(item) if isinstance(item, Cache) else item for item in outputs]
        return tuple(item for item, old in zip(given, outputs) if item is not None or old is None)
    for key, value in list(outputs.items()):
        if isinstance(value, Cache):
            past = back(value)
            if past is None:  # a ModelOutput keeps a key set to None: built again without it
                outputs = type(outputs)(**{k: v for k, v in outputs.items() if k != key})
            else:
                outputs[key] = past
    return outputs


def encoder_decoder_past_in_outputs(outputs):
    """`outputs` (a ModelOutput or a tuple) of a library encoder-decoder model with each Cache in it replaced by a tuple
    per layer, as a tuple-era encoder-decoder model gave back (vendored by cachemigrate): the self-attention's (keys,
    values), followed by the cross-attention's where it holds them (an EncoderDecoderCache); read off `layers` from
    transformers 4.54 on, through `to_legacy_cache()` before."""

    def pairs(cache):
        if not hasattr(cache, "layers"):
            return [tuple(layer) for layer in cache.to_legacy_cache()]
        found = [(layer.keys, layer.values) for layer in cache.layers]
        return [pair if pair[0] is not None and pair[0].numel() > 0 else () for pair in found]

    def legacy(cache):
        if not hasattr(cache, "cross_attention_cache"):
            return tuple(pairs(cache))
        if not hasattr(cache.self_attention_cache, "layers"):
            return cache.to_legacy_cache()
        cross = pairs(cache.cross_attention_cache)
        own = pairs(cache.self_attention_cache)
        return tuple(pair + (cross[index] if pair and index < len(cross) else ()) for index, pair in enumerate(own))

    if isinstance(outputs, tuple):
        return tuple(legacy(item) if isinstance(item, Cache) else item for item in outputs)
    for key, value in list(outputs.items()):
        if isinstance(value, Cache):
            outputs[key] = legacy(value)
    return outputs


def encoder_decoder_cache_of(past):
    """An EncoderDecoderCache holding `past`, a tuple per layer of the self-attention's (keys, values) followed by the
    cross-attention's (vendored by cachemigrate): through `from_legacy_cache` where the release has it (4.x), the
    constructor of 5.x otherwise."""
    if hasattr(EncoderDecoderCache, "from_legacy_cache"):
        return EncoderDecoderCache.from_legacy_cache(past)
    return EncoderDecoderCache(past)
