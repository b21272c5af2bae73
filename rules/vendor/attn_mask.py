"""The helpers of ``transformers.modeling_attn_mask_utils``, vendored by cachemigrate: transformers 5.x deleted the
module (it is gone by 5.24). Written for cachemigrate; each gives the masks the transformers 4.51 helper of the
same name gives (the same values, shapes and ``None`` decisions), so a migrated file computes what it did."""

import torch


def _mask_tracing(tensor):
    """True while tracing or compiling: the masks are then always materialised."""
    return torch.jit.is_tracing() or isinstance(tensor, torch.fx.Proxy) or torch.compiler.is_compiling()


class AttentionMaskConverter:
    """Additive attention masks (0 where a query may attend, the dtype's minimum elsewhere), causal or not, with an
    optional sliding window (vendored by cachemigrate; transformers 5.x deleted `modeling_attn_mask_utils`)."""

    def __init__(self, is_causal, sliding_window=None):
        if sliding_window is not None and sliding_window <= 0:
            raise ValueError(f"`sliding_window` must be a strictly positive integer, not `{sliding_window}`")
        self.is_causal = is_causal
        self.sliding_window = sliding_window

    def to_causal_4d(self, batch_size, query_length, key_value_length, dtype, device="cpu"):
        """The causal mask `(batch, 1, query_length, key_value_length)`; None for a single query (no window)."""
        if not self.is_causal:
            raise ValueError(f"`to_causal_4d` needs a causal {type(self).__name__}")
        if query_length <= 1 and self.sliding_window is None:
            return None
        past = key_value_length - query_length
        return self._make_causal_mask((batch_size, query_length), dtype, device, past, self.sliding_window)

    def to_4d(self, attention_mask_2d, query_length, dtype, key_value_length=None):
        """A 2D padding mask `(batch, keys)` as an additive 4D mask, combined with the causal one when causal."""
        padding = self._expand_mask(attention_mask_2d, dtype, tgt_len=query_length).to(attention_mask_2d.device)
        if self.is_causal and (query_length > 1 or self.sliding_window is not None):
            if key_value_length is None:
                raise ValueError("a causal mask needs `key_value_length`")
            shape = (attention_mask_2d.shape[0], query_length)
            past = key_value_length - query_length
            causal = self._make_causal_mask(shape, dtype, attention_mask_2d.device, past, self.sliding_window)
            return causal.masked_fill(padding.bool(), torch.finfo(dtype).min)
        if self.sliding_window is not None:
            raise NotImplementedError("a sliding window needs a causal mask")
        return padding

    @staticmethod
    def _make_causal_mask(input_ids_shape, dtype, device, past_key_values_length=0, sliding_window=None):
        """Query i (at position past + i) sees keys 0 .. past + i, and with a window only the last
        `sliding_window` + 1 of them."""
        batch, length = input_ids_shape
        total = length + past_key_values_length
        position = torch.arange(length, device=device)[:, None] + past_key_values_length
        keys = torch.arange(total, device=device)[None, :]
        hidden = keys > position
        if sliding_window is not None:
            hidden = hidden | (keys <= position - sliding_window - 1)
        mask = torch.zeros((length, total), dtype=dtype, device=device).masked_fill(hidden, torch.finfo(dtype).min)
        return mask[None, None, :, :].expand(batch, 1, length, total)

    @staticmethod
    def _expand_mask(mask, dtype, tgt_len=None):
        """`(batch, keys)` -> `(batch, 1, tgt_len, keys)`: 0 where the mask is 1, the dtype's minimum elsewhere."""
        batch, keys = mask.size()
        tgt_len = keys if tgt_len is None else tgt_len
        inverted = 1.0 - mask[:, None, None, :].expand(batch, 1, tgt_len, keys).to(dtype)
        return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)

    @staticmethod
    def _unmask_unattended(expanded_mask, min_dtype):
        """Rows that attend to nothing attend to everything instead (what the memory-efficient sdpa kernel
        needs on CUDA)."""
        if expanded_mask.dtype == torch.bool:
            raise ValueError("`_unmask_unattended` expects a float mask")
        return expanded_mask.mul(~torch.all(expanded_mask == min_dtype, dim=-1, keepdim=True))

    @staticmethod
    def _ignore_causal_mask_sdpa(
        attention_mask, inputs_embeds, past_key_values_length, sliding_window=None, is_training=False
    ):
        """True when sdpa's own `is_causal` gives the same result as the explicit mask, so none is built."""
        query_length = inputs_embeds.shape[1]
        key_value_length = query_length + past_key_values_length
        within_window = sliding_window is None or key_value_length < sliding_window
        square_or_one = query_length == 1 or key_value_length == query_length
        tracing = _mask_tracing(inputs_embeds)
        if attention_mask is None:
            return bool((is_training or not tracing) and square_or_one and within_window)
        if not within_window or len(attention_mask.shape) == 4:
            return False
        return bool(not tracing and torch.all(attention_mask == 1) and square_or_one)


def _prepare_4d_causal_attention_mask(
    attention_mask, input_shape, inputs_embeds, past_key_values_length, sliding_window=None
):
    """The additive causal 4D mask `(batch, 1, query_length, past + query_length)` for a 2D padding mask, a 4D
    mask (0/1, inverted) or None (vendored by cachemigrate; transformers 5.x deleted `modeling_attn_mask_utils`)."""
    converter = AttentionMaskConverter(is_causal=True, sliding_window=sliding_window)
    key_value_length = input_shape[-1] + past_key_values_length
    dtype = inputs_embeds.dtype
    if attention_mask is not None and len(attention_mask.shape) == 2:
        return converter.to_4d(attention_mask, input_shape[-1], key_value_length=key_value_length, dtype=dtype)
    if attention_mask is not None and len(attention_mask.shape) == 4:
        expected = (input_shape[0], 1, input_shape[1], key_value_length)
        if tuple(attention_mask.shape) != expected:
            raise ValueError(f"Incorrect 4D attention_mask shape: {tuple(attention_mask.shape)}; expected: {expected}.")
        inverted = 1.0 - attention_mask
        return inverted.masked_fill(inverted.to(torch.bool), torch.finfo(dtype).min)
    return converter.to_causal_4d(
        input_shape[0], input_shape[-1], key_value_length, dtype=dtype, device=inputs_embeds.device
    )


def _prepare_4d_causal_attention_mask_for_sdpa(
    attention_mask, input_shape, inputs_embeds, past_key_values_length, sliding_window=None
):
    """As `_prepare_4d_causal_attention_mask`, but None where sdpa's `is_causal` does the same (vendored by
    cachemigrate; transformers 5.x deleted `modeling_attn_mask_utils`)."""
    converter = AttentionMaskConverter(is_causal=True, sliding_window=sliding_window)
    key_value_length = input_shape[-1] + past_key_values_length
    dtype = inputs_embeds.dtype
    if AttentionMaskConverter._ignore_causal_mask_sdpa(
        attention_mask=attention_mask,
        inputs_embeds=inputs_embeds,
        past_key_values_length=past_key_values_length,
        sliding_window=sliding_window,
    ):
        return None
    if attention_mask is None:
        return converter.to_causal_4d(
            input_shape[0], input_shape[-1], key_value_length, dtype=dtype, device=inputs_embeds.device
        )
    if attention_mask.dim() == 4:
        mask = attention_mask
    else:
        mask = converter.to_4d(attention_mask, input_shape[-1], dtype=dtype, key_value_length=key_value_length)
    if not _mask_tracing(inputs_embeds) and mask.device.type == "cuda":
        mask = AttentionMaskConverter._unmask_unattended(mask, min_dtype=torch.finfo(dtype).min)
    return mask


def _prepare_4d_attention_mask(mask, dtype, tgt_len=None):
    """A 2D padding mask `(batch, keys)` as an additive `(batch, 1, tgt_len, keys)` mask (vendored by
    cachemigrate; transformers 5.x deleted `modeling_attn_mask_utils`)."""
    return AttentionMaskConverter._expand_mask(mask=mask, dtype=dtype, tgt_len=tgt_len)


def _prepare_4d_attention_mask_for_sdpa(mask, dtype, tgt_len=None):
    """As `_prepare_4d_attention_mask`, but None when nothing is masked (vendored by cachemigrate; transformers
    5.x deleted `modeling_attn_mask_utils`)."""
    if not _mask_tracing(mask) and torch.all(mask == 1):
        return None
    return AttentionMaskConverter._expand_mask(mask=mask, dtype=dtype, tgt_len=tgt_len)


def _create_4d_causal_attention_mask(input_shape, dtype, device, past_key_values_length=0, sliding_window=None):
    """The causal mask alone, `(batch, 1, query_length, past + query_length)`, or None for one query (vendored by
    cachemigrate; transformers 5.x deleted `modeling_attn_mask_utils`)."""
    converter = AttentionMaskConverter(is_causal=True, sliding_window=sliding_window)
    key_value_length = past_key_values_length + input_shape[-1]
    return converter.to_causal_4d(input_shape[0], input_shape[-1], key_value_length, dtype=dtype, device=device)
