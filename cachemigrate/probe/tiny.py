"""Tiny configs: a config class's defaults shrunk to 2 layers, width 32 and 4 heads, with every dependent size kept
consistent with those.

The sizes are set by a table, :data:`RULES`: each row names the config attributes it covers (the names that config
classes actually store, aliases of ``attribute_map`` are left alone) and how to derive the tiny value from the
default one. The overrides are passed to the config class's constructor, so that whatever the constructor derives
from them (Falcon's ``num_kv_heads``, GPT-Neo's ``attention_layers``, Llama's ``head_dim``) is derived from the tiny
sizes; they are then set on the result as well, for constructors that do not take them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

LAYERS, WIDTH, HEADS, FFN, VOCAB, POSITIONS = 2, 32, 4, 64, 99, 64

WIDTH_NAMES = ("n_embd", "hidden_size", "d_model", "embed_dim")
HEAD_NAMES = (
    "n_head",
    "num_attention_heads",
    "n_heads",
    "num_heads",
    "attention_heads",
    "encoder_attention_heads",
    "decoder_attention_heads",
)
HEAD_DIM_NAMES = ("head_dim", "d_kv", "kv_channels")


@dataclass(frozen=True)
class Sizes:
    """The default config's head count and head size, which the dependent sizes are derived from."""

    old_head_dim: int | None
    head_dim: int = WIDTH // HEADS
    old_heads: int | None = None

    @classmethod
    def of(cls, values: dict) -> "Sizes":
        width, heads = _first_int(values, WIDTH_NAMES), _first_int(values, HEAD_NAMES)
        head_dim = _first_int(values, HEAD_DIM_NAMES) or (width // heads if width and heads else None)
        return cls(old_head_dim=head_dim, old_heads=heads)


def _first_int(values: dict, names) -> int | None:
    return next((values[n] for n in names if isinstance(values.get(n), int) and values[n] > 0), None)


# -- how dependent sizes follow ---------------------------------------------------------------------------------------


def _const(value) -> Callable:
    return lambda old, sizes: value


def _kv_heads(old, sizes: Sizes):
    """Keep the attention kind: multi-head (as many as the heads), multi-query (1) or grouped (2 of 4)."""
    if not isinstance(old, int) or sizes.old_heads is None:
        return old
    if old >= sizes.old_heads:
        return HEADS
    return 1 if old == 1 else HEADS // 2


def _rotary_dim(old, sizes: Sizes):
    """Rotary embedding over the whole head (the head size) or over part of it (half of it), as in the default."""
    if not isinstance(old, int) or sizes.old_head_dim is None:
        return old
    return sizes.head_dim if old >= sizes.old_head_dim else max(2, sizes.head_dim // 4 * 2)


def _rotary_fraction(old, sizes: Sizes):
    """``rotary_pct`` / ``partial_rotary_factor``: kept, unless it gives an odd or empty rotary size on a tiny head."""
    if not isinstance(old, float) or not 0 < old < 1:
        return old
    rotary = int(sizes.head_dim * old)
    return old if rotary >= 2 and rotary % 2 == 0 else 0.5


def _attention_types(old, sizes: Sizes):
    """GPT-Neo: ``[[pattern, repeats], ...]`` must expand to one attention kind per layer."""
    if not isinstance(old, list):
        return old
    kinds = [kind for pattern, repeats in old for _ in range(repeats) for kind in pattern]
    return [[kinds[:LAYERS], 1]] if len(kinds) >= LAYERS else old


def _per_layer(old, sizes: Sizes):
    return old[:LAYERS] if isinstance(old, list) else old


@dataclass(frozen=True)
class Rule:
    """A row of the table: the attributes it covers, and the tiny value as a function of (default value, sizes)."""

    names: tuple[str, ...]
    derive: Callable
    keep_none: bool = True  # None usually means "derived from the others" (GPT-2's n_inner): leave it None


RULES = (
    Rule(
        ("n_layer", "num_hidden_layers", "num_layers", "n_layers", "encoder_layers", "decoder_layers")
        + ("num_decoder_layers",),
        _const(LAYERS),
    ),
    # Kosmos-2's text config counts its blocks in `layers`; only a count is shrunk (not a list of layer settings)
    Rule(("layers",), lambda old, sizes: LAYERS if isinstance(old, int) and not isinstance(old, bool) else old),
    Rule(WIDTH_NAMES + ("word_embed_proj_dim",), _const(WIDTH)),  # OPT projects embeddings of this width
    Rule(HEAD_NAMES, _const(HEADS)),
    Rule(HEAD_DIM_NAMES, lambda old, sizes: sizes.head_dim),
    Rule(("num_key_value_heads", "num_kv_heads", "n_head_kv", "kv_n_heads", "multi_query_group_num"), _kv_heads),
    Rule(("rotary_dim", "rotary_emb_dim"), _rotary_dim),
    Rule(("rotary_pct", "partial_rotary_factor"), _rotary_fraction),
    Rule(
        ("dff", "intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "ffn_hidden_size"),
        _const(FFN),
    ),
    Rule(("n_inner",), _const(None), keep_none=False),  # None: 4 x width
    Rule(
        ("vocab_size", "decoder_vocab_size", "input_vocab_size", "output_vocab_size")
        + ("src_vocab_size", "tgt_vocab_size"),  # FSMT: one vocabulary for each language
        _const(VOCAB),
        keep_none=False,
    ),
    Rule(
        ("n_positions", "max_position_embeddings", "n_ctx", "max_seq_len", "max_target_positions"), _const(POSITIONS)
    ),
    Rule(("num_codebooks",), _const(1)),  # MusicGen: one codebook, so that a (batch, seq) of token ids is valid
    Rule(("attention_types",), _attention_types),
    Rule(("attention_layers",), _per_layer),
)

DROPOUT_MARKS = ("pdrop", "dropout", "layerdrop")

# A setting left unset whose choices the config lists: ``default_language=None`` with ``languages=["en_XX"]`` (X-MOD
# refuses to run on token ids alone until a default is chosen). Any ``default_<name>`` that is None, beside a
# non-empty list ``<name>s``, gets the list's first entry.
DEFAULT_PREFIX, CHOICES_SUFFIX = "default_", "s"

# The model type of an ``AutoConfig`` slot of a composite config that cannot be built empty (MusicGen's
# ``MusicgenConfig()`` raises: it needs a text encoder, an audio encoder and a decoder config). The probe gives such
# a slot a tiny config of this type; the decoder under test is the composite's own sub-config class.
SUB_CONFIG_TYPES = {"text_encoder": "t5", "audio_encoder": "encodec"}


def tiny_overrides(values: dict) -> dict:
    """{attribute: tiny value} for the attributes in ``values`` (a config's ``vars``) that :data:`RULES` cover, plus
    every float dropout set to 0 and every unset default that its config lists the choices of."""
    sizes = Sizes.of(values)
    overrides = {}
    for rule in RULES:
        for name in rule.names:
            if name in values and not (rule.keep_none and values[name] is None):
                overrides[name] = rule.derive(values[name], sizes)
    for name, value in values.items():
        if any(mark in name for mark in DROPOUT_MARKS) and isinstance(value, float):
            overrides[name] = 0.0
    overrides.update(_chosen_defaults(values))
    return overrides


def _chosen_defaults(values: dict) -> dict:
    """{``default_<name>``: first of ``<name>s``} for every such default that is None (see :data:`DEFAULT_PREFIX`)."""
    chosen = {}
    for name, value in values.items():
        if value is not None or not name.startswith(DEFAULT_PREFIX):
            continue
        choices = values.get(name[len(DEFAULT_PREFIX) :] + CHOICES_SUFFIX)
        if isinstance(choices, (list, tuple)) and choices:
            chosen[name] = choices[0]
    return chosen


def tiny_config(config_class, *, attn: str = "eager", torchscript: bool = False, settings: dict | None = None):
    """Default config of ``config_class`` shrunk to 2 layers, width 32, 4 heads, vocab 99, no dropout, with the
    dependent sizes (head size, key/value heads, rotary size, feed-forward and per-layer settings) consistent.
    ``settings`` (``{"multi_query": False}``) are set last, over the tiny values, for a variant of the model."""
    default, helpers = _default(config_class, attn, torchscript)
    overrides = tiny_overrides(vars(default))
    overrides.update(use_cache=True, pad_token_id=0, bos_token_id=None, eos_token_id=None, torchscript=torchscript)
    start = getattr(default, "decoder_start_token_id", None)
    if "decoder_start_token_id" in vars(default) and not (isinstance(start, int) and 0 <= start < VOCAB):
        # no start token, or one outside the tiny vocabulary (MusicGen's 2048): generate() needs one
        overrides["decoder_start_token_id"] = 0
    overrides.update(settings or {})
    try:
        config = config_class(**overrides)
    except Exception:  # noqa: BLE001 - a constructor that rejects some keyword: set them all on the default
        config = default
    for name, value in overrides.items():
        setattr(config, name, value)
    _shrink_nested(config)
    config._attn_implementation = attn
    if helpers:  # the tiny text and audio encoders run eager (T5 has no sdpa); the decoder under test runs ``attn``
        slots = config_class.sub_configs
        config._attn_implementation = {slot: "eager" if slot in helpers else attn for slot in slots}
    return config


def _default(config_class, attn: str, torchscript: bool):
    """(``config_class()``, ()), or for a composite config that cannot be built empty, (one built from tiny configs
    of its ``sub_configs``, the ``AutoConfig`` slots): such a slot gets the model type :data:`SUB_CONFIG_TYPES`
    names."""
    try:
        return config_class(), ()
    except Exception:
        slots = getattr(config_class, "sub_configs", None) or {}
        if not slots:
            raise
    from transformers import AutoConfig

    parts, helpers = {}, []
    for slot, part_class in slots.items():
        if part_class is AutoConfig:
            helpers.append(slot)
            if slot not in SUB_CONFIG_TYPES:
                raise ValueError(f"{config_class.__name__}: no tiny config for its {slot!r} (an AutoConfig slot)")
            part_class = type(AutoConfig.for_model(SUB_CONFIG_TYPES[slot]))
        parts[slot] = tiny_config(part_class, attn=attn, torchscript=torchscript).to_dict()
    return config_class(**parts), tuple(helpers)


def _shrink_nested(config, depth: int = 0) -> None:
    """The same rules on sub-configs held as attributes (MPT's ``attn_config``)."""
    from transformers import PretrainedConfig

    for value in list(vars(config).values()):
        if isinstance(value, PretrainedConfig) and depth < 3:
            for name, tiny in tiny_overrides(vars(value)).items():
                setattr(value, name, tiny)
            _shrink_nested(value, depth + 1)


def vocab_of(config) -> int:
    """The number of input token ids of a config (Bark's sub-models call it ``input_vocab_size``; a head over a
    library model it builds from ``config.text_config``, as multimodal heads do, takes that model's tokens)."""
    for name in ("vocab_size", "input_vocab_size", "src_vocab_size"):
        if isinstance(getattr(config, name, None), int):
            return getattr(config, name)
    text = getattr(config, "text_config", None)
    if text is not None and text is not config:
        return vocab_of(text)
    raise AttributeError(f"{type(config).__name__} has no vocab_size")
