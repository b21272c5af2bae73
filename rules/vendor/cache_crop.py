"""Cropping a transformers Cache to what a `[:, :, :end]` slice of each layer keeps, the same way on every release:
`crop` took the length to keep (or, negative, the number of tokens to drop) up to 5.19, and only the negative form
from 5.20 on. Written for cachemigrate."""


def crop_cache_to(cache, end):
    """Keep what `keys[:, :, :end]` keeps of every layer of `cache`, in place (vendored by cachemigrate: a negative
    `crop` drops that many tokens on every transformers release; a positive one is an error from 5.20 on)."""
    length = cache.get_seq_length()
    kept = len(range(length)[:end])
    if kept < length:
        cache.crop(kept - length)
