"""Tiny configs: a config class's defaults shrunk to 2 layers, width 32, 4 heads."""

from __future__ import annotations

_SIZES = (
    (("n_layer", "num_hidden_layers", "num_layers"), 2),
    (("n_embd", "hidden_size", "d_model"), 32),
    (("n_head", "num_attention_heads"), 4),
    (("dff", "intermediate_size"), 64),
    (("vocab_size",), 99),
    (("n_positions", "max_position_embeddings", "n_ctx"), 64),
)


def tiny_config(config_class, *, attn: str = "eager", torchscript: bool = False):
    """Default config of ``config_class`` shrunk to 2 layers, width 32, 4 heads, vocab 99, no dropout."""
    config = config_class()
    for names, value in _SIZES:
        for name in names:
            if hasattr(config, name):
                setattr(config, name, value)
    if hasattr(config, "n_inner"):
        config.n_inner = None
    for name, value in list(vars(config).items()):
        if ("pdrop" in name or "dropout" in name) and isinstance(value, float):
            setattr(config, name, 0.0)
    config.use_cache = True
    config.pad_token_id = 0
    config.bos_token_id = None
    config.eos_token_id = None
    config.torchscript = torchscript
    config._attn_implementation = attn
    return config
