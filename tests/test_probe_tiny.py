"""Tiny configs keep dependent sizes consistent: a tiny model of each config class builds and runs, with a cache.

Run on config and model classes of the installed transformers 4.51.3, and on a MOSS-style remote-code folder whose
config is written here (n_embd and rotary_dim=64, as MOSS has): the modeling file is transformers' own CodeGen
file with its imports made absolute, copied at test time.
"""

import inspect
import re
from pathlib import Path

import pytest

from cachemigrate.probe import run_probe, tiny_config
from cachemigrate.probe.tiny import HEAD_NAMES, HEADS, LAYERS, WIDTH

pytestmark = pytest.mark.corpus

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
MODELS_DIR = Path(transformers.__file__).parent / "models"


class FalconNewArchitectureConfig(transformers.FalconConfig):
    """Falcon-40B style: the new decoder architecture with grouped key/value heads (128 heads, 8 kv heads)."""

    def __init__(self, **kwargs):
        defaults = dict(new_decoder_architecture=True, num_attention_heads=128, num_kv_heads=8, hidden_size=8192)
        super().__init__(**{**defaults, **kwargs})


class FullRotaryGPTJConfig(transformers.GPTJConfig):
    """GPT-J with rotary embeddings over the whole head."""

    def __init__(self, rotary_dim=256, **kwargs):
        super().__init__(rotary_dim=rotary_dim, **kwargs)


class MossConfig(transformers.PretrainedConfig):
    """A MOSS-style config (as in fnlp/moss-moon-003-base's remote code): CodeGen sizes under GPT-2 names."""

    model_type = "moss"
    attribute_map = {
        "max_position_embeddings": "n_positions",
        "hidden_size": "n_embd",
        "num_attention_heads": "n_head",
        "num_hidden_layers": "n_layer",
    }

    def __init__(
        self,
        vocab_size=107008,
        n_positions=2048,
        n_ctx=2048,
        n_embd=6144,
        n_layer=34,
        n_head=24,
        rotary_dim=64,
        n_inner=None,
        activation_function="gelu_new",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        initializer_range=0.02,
        use_cache=True,
        bos_token_id=106028,
        eos_token_id=106068,
        tie_word_embeddings=False,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.n_ctx = n_ctx
        self.n_positions = n_positions
        self.n_embd = n_embd
        self.n_layer = n_layer
        self.n_head = n_head
        self.n_inner = n_inner
        self.rotary_dim = rotary_dim
        self.activation_function = activation_function
        self.resid_pdrop = resid_pdrop
        self.embd_pdrop = embd_pdrop
        self.attn_pdrop = attn_pdrop
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.use_cache = use_cache
        super().__init__(
            bos_token_id=bos_token_id, eos_token_id=eos_token_id, tie_word_embeddings=tie_word_embeddings, **kwargs
        )


# (config class, model class to build from it)
CASES = [
    ("GPT2Config", "GPT2LMHeadModel"),
    ("CTRLConfig", "CTRLLMHeadModel"),
    ("GPTJConfig", "GPTJForCausalLM"),  # rotary_dim 64 of a 256 head
    ("CodeGenConfig", "CodeGenForCausalLM"),  # rotary_dim, n_ctx
    ("GPTNeoXConfig", "GPTNeoXForCausalLM"),  # rotary_pct
    ("GPTNeoConfig", "GPTNeoForCausalLM"),  # attention_types per layer
    ("FalconConfig", "FalconForCausalLM"),  # multi_query, num_kv_heads derived in __init__
    (FalconNewArchitectureConfig, "FalconForCausalLM"),  # grouped kv heads
    ("LlamaConfig", "LlamaForCausalLM"),  # head_dim attribute
    ("MistralConfig", "MistralForCausalLM"),  # 8 kv heads of 32
    ("GemmaConfig", "GemmaForCausalLM"),  # head_dim independent of the width
    ("PhiConfig", "PhiForCausalLM"),  # partial_rotary_factor
    ("BloomConfig", "BloomForCausalLM"),
    ("MptConfig", "MptForCausalLM"),  # n_heads, n_layers, max_seq_len, nested attn_config
    ("GPTBigCodeConfig", "GPTBigCodeForCausalLM"),  # multi_query
    ("OPTConfig", "OPTForCausalLM"),  # word_embed_proj_dim
    ("BartConfig", "BartForCausalLM"),  # encoder_/decoder_ sizes
    ("BartConfig", "BartForConditionalGeneration"),
    ("T5Config", "T5ForConditionalGeneration"),  # d_kv, d_ff, num_decoder_layers
]


def _resolve(name):
    return getattr(transformers, name) if isinstance(name, str) else name


def _ints(config, names) -> dict:
    return {n: v for n in names if isinstance((v := vars(config).get(n)), int)}


def assert_consistent(config) -> None:
    values = vars(config)
    layers = _ints(config, ("n_layer", "num_hidden_layers", "num_layers", "n_layers", "encoder_layers"))
    layers.update(_ints(config, ("decoder_layers", "num_decoder_layers")))
    assert layers and all(v == LAYERS for v in layers.values()), layers
    heads = _ints(config, HEAD_NAMES)
    assert heads and all(v == HEADS for v in heads.values()), heads
    head_dim = WIDTH // HEADS
    for name in ("head_dim", "d_kv", "kv_channels"):
        if isinstance(values.get(name), int):
            assert values[name] == head_dim, (name, values[name])
    for name in ("num_key_value_heads", "num_kv_heads", "n_head_kv"):
        if isinstance(values.get(name), int):
            assert HEADS % values[name] == 0, (name, values[name])
    if isinstance(values.get("rotary_dim"), int):
        assert 2 <= config.rotary_dim <= head_dim and config.rotary_dim % 2 == 0, config.rotary_dim
    for name in ("rotary_pct", "partial_rotary_factor"):
        if isinstance(values.get(name), float):
            rotary = int(head_dim * values[name])
            assert rotary >= 2 and rotary % 2 == 0, (name, values[name])
    dropouts = {n: v for n, v in values.items() if "dropout" in n or "pdrop" in n or "layerdrop" in n}
    assert all(v in (0, 0.0) for v in dropouts.values() if isinstance(v, float)), dropouts


@pytest.mark.parametrize("config_name, model_name", CASES, ids=[f"{_resolve(c).__name__}-{m}" for c, m in CASES])
def test_tiny_model_of_each_config_class_builds_and_runs_with_a_cache(config_name, model_name):
    config = tiny_config(_resolve(config_name))
    assert_consistent(config)
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(config).eval()
    assert sum(p.numel() for p in model.parameters()) < 200_000  # tiny, not the default size
    ids = torch.randint(1, 98, (2, 5))
    seq2seq = "decoder_input_ids" in inspect.signature(model.forward).parameters
    kwargs = {"decoder_input_ids": ids} if seq2seq else {}
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True, **kwargs)
        assert out.logits.shape == (2, 5, 99)
        step = ids[:, :1]
        kwargs = {"decoder_input_ids": step, "input_ids": ids} if seq2seq else {"input_ids": step}
        again = model(past_key_values=out.past_key_values, use_cache=True, **kwargs)
    assert again.logits.shape == (2, 1, 99)


def test_dependent_sizes_follow_the_kind_of_the_default():
    """Full rotary stays full and partial stays partial; multi-head, grouped and multi-query kv heads stay so."""
    assert tiny_config(transformers.GPTJConfig).rotary_dim == 4  # 64 of 256: partial
    assert tiny_config(FullRotaryGPTJConfig).rotary_dim == WIDTH // HEADS
    assert tiny_config(transformers.LlamaConfig).num_key_value_heads == HEADS  # 32 of 32
    assert tiny_config(transformers.MistralConfig).num_key_value_heads == 2  # 8 of 32: grouped
    assert tiny_config(FalconNewArchitectureConfig).num_kv_heads == 2
    assert tiny_config(transformers.FalconConfig).num_kv_heads == HEADS  # derived from the heads in __init__
    neo = tiny_config(transformers.GPTNeoConfig)
    assert neo.attention_layers == ["global", "local"]
    assert tiny_config(transformers.MptConfig).attn_config.attn_pdrop == 0


def test_moss_style_config_is_shrunk_consistently():
    config = tiny_config(MossConfig)
    assert (config.n_embd, config.n_head, config.n_layer) == (WIDTH, HEADS, LAYERS)
    assert config.rotary_dim == 4  # partial rotary, as 64 of a 256 head is, inside the 8 of a tiny head
    assert config.n_ctx == config.n_positions == 64
    assert_consistent(config)


def test_probe_runs_on_a_moss_style_remote_code_folder(tmp_path):
    """Before the dependent sizes were kept, rotary_dim 64 on a head of 8 made both sides crash."""
    source = (MODELS_DIR / "codegen" / "modeling_codegen.py").read_text(encoding="utf-8")
    source = re.sub(r"from \.\.\.(\w[\w.]*) import", r"from transformers.\1 import", source)
    source = source.replace(
        "from .configuration_codegen import CodeGenConfig",
        "from .configuration_moss import MossConfig as CodeGenConfig",
    )
    assert "from ..." not in source
    config_source = Path(__file__).read_text(encoding="utf-8")
    config_source = config_source[config_source.index("class MossConfig") : config_source.index("# (config class")]
    for side in ("original", "migrated"):
        folder = tmp_path / side
        folder.mkdir()
        (folder / "configuration_moss.py").write_text("import transformers\n\n\n" + config_source, encoding="utf-8")
        (folder / "modeling_moss.py").write_text(source, encoding="utf-8")
    checks = ["logits_no_cache", "tuple_cache_stepwise", "output_attentions", "generate_beam"]
    results = run_probe(
        tmp_path / "original" / "modeling_moss.py", tmp_path / "migrated" / "modeling_moss.py", checks=checks
    )
    assert {r.name: r.status for r in results} == dict.fromkeys(checks, "pass"), [(r.name, r.detail) for r in results]


def test_a_block_count_named_layers_is_shrunk_but_a_list_of_layer_settings_is_not():
    from cachemigrate.probe.tiny import tiny_overrides

    assert tiny_overrides({"layers": 24})["layers"] < 24
    assert tiny_overrides({"layers": ["full", "sliding"]})["layers"] == ["full", "sliding"]


def test_a_composite_config_that_cannot_be_built_empty_is_built_from_tiny_sub_configs():
    """MusicgenConfig() raises (it needs a text encoder, an audio encoder and a decoder config): the probe builds it
    from tiny sub-configs, the AutoConfig slots eager (T5 has no sdpa), the decoder under test with the attention
    asked for."""
    config = tiny_config(transformers.MusicgenConfig, attn="sdpa")
    assert type(config.text_encoder) is transformers.T5Config
    assert type(config.audio_encoder) is transformers.EncodecConfig
    assert (config.text_encoder.d_model, config.decoder.hidden_size, config.decoder.num_hidden_layers) == (
        WIDTH,
        WIDTH,
        LAYERS,
    )
    assert config._attn_implementation == {"text_encoder": "eager", "audio_encoder": "eager", "decoder": "sdpa"}
    torch.manual_seed(0)
    model = transformers.MusicgenForConditionalGeneration(config).eval()
    assert model.decoder.config._attn_implementation == "sdpa"
    assert model.text_encoder.config._attn_implementation == "eager"


def test_the_start_token_is_inside_the_tiny_vocabulary():
    """generate() needs a decoder start token: MusicGen's decoder has none of its own (its bos 2048 is dropped),
    Marian's is its pad id 58100; both become 0. BART's 2 is kept."""
    assert tiny_config(transformers.MusicgenDecoderConfig).decoder_start_token_id == 0
    assert tiny_config(transformers.MarianConfig).decoder_start_token_id == 0
    assert tiny_config(transformers.BartConfig).decoder_start_token_id == 2


def test_an_unset_default_is_chosen_from_the_choices_its_config_lists():
    """X-MOD style: ``default_language=None`` beside ``languages``; the model refuses token ids alone until a default
    is chosen. A default already set, or one without a list of choices, is left alone."""
    from cachemigrate.probe.tiny import tiny_overrides

    class AdapterConfig(transformers.PretrainedConfig):
        model_type = "cm_adapters"

        def __init__(self, languages=("de_DE", "en_XX"), default_language=None, default_style=None, **kwargs):
            self.languages, self.default_language, self.default_style = (
                list(languages),
                default_language,
                default_style,
            )
            super().__init__(**kwargs)

    config = tiny_config(AdapterConfig)
    assert config.default_language == "de_DE" and config.default_style is None
    assert "default_language" not in tiny_overrides({"languages": ["de_DE"], "default_language": "en_XX"})
    assert "default_language" not in tiny_overrides({"languages": [], "default_language": None})
