"""The helpers vendored into migrated files (rules/vendor/*.py, and the methods CM440-CM443 add) give what the
transformers 4.51.3 definitions of the same name give, on random inputs with fixed seeds: exactly (torch.equal,
the same exception type and message) wherever the original is exact."""

import importlib.util
import itertools
import random
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
if transformers.__version__ != "4.51.3":  # the reference: the release whose helpers were vendored
    pytest.skip(f"compares with transformers 4.51.3, found {transformers.__version__}", allow_module_level=True)

from transformers import modeling_attn_mask_utils as ref_mask  # noqa: E402
from transformers import pytorch_utils as ref_pytorch  # noqa: E402
from transformers.modeling_utils import SequenceSummary as RefSequenceSummary  # noqa: E402
from transformers.modeling_utils import get_parameter_device as ref_get_parameter_device  # noqa: E402
from transformers.utils import import_utils as ref_import  # noqa: E402
from transformers.utils import model_parallel_utils as ref_parallel  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
VENDOR = REPO / "rules" / "vendor"


def vendor(name: str):
    spec = importlib.util.spec_from_file_location(f"cachemigrate_vendor_{name}", VENDOR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


MASK, COMPAT, PARALLEL, PRUNING, SUMMARY, DEVICE = map(
    vendor, ["attn_mask", "compat", "model_parallel", "pruning", "sequence_summary", "module_device"]
)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def outcome(function, *args, message=False, **kwargs):
    """The result, or the type of the exception raised (and its message, with ``message``: the vendored code is
    written for this repo, so most of its messages are its own)."""
    try:
        return function(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - compared, not handled
        return (type(exc), str(exc)) if message else (type(exc),)


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def padding_mask(rng: random.Random, batch: int, length: int) -> torch.Tensor:
    """0/1 (batch, length); sometimes all ones, sometimes left padding, sometimes random holes."""
    kind = rng.choice(["ones", "left", "holes"])
    mask = torch.ones(batch, length, dtype=torch.long)
    for row in range(batch):
        if kind == "left":
            mask[row, : rng.randrange(length)] = 0
        elif kind == "holes":
            mask[row] = torch.tensor([rng.random() < 0.7 for _ in range(length)], dtype=torch.long)
    return mask


def mask_cases(seed: int, count: int = 60):
    rng = random.Random(seed)
    for _ in range(count):
        batch, query, past = rng.randint(1, 3), rng.randint(1, 5), rng.randint(0, 4)
        window = rng.choice([None, None, 1, 2, 3, 6])
        dtype = rng.choice(DTYPES)
        embeds = torch.zeros(batch, query, 4, dtype=dtype)
        kind = rng.choice(["none", "2d", "2d", "4d"])
        if kind == "none":
            mask = None
        elif kind == "2d":
            mask = padding_mask(rng, batch, past + query)
        else:
            mask = torch.rand(batch, 1, query, past + query, generator=torch.Generator().manual_seed(seed)) > 0.3
            mask = mask.to(dtype)
        yield batch, query, past, window, dtype, embeds, mask


@pytest.mark.parametrize("name", ["_prepare_4d_causal_attention_mask", "_prepare_4d_causal_attention_mask_for_sdpa"])
def test_causal_4d_masks_equal_4_51(name):
    mine, theirs = getattr(MASK, name), getattr(ref_mask, name)
    for seed in range(3):
        for batch, query, past, window, _, embeds, mask in mask_cases(seed):
            args = (mask, (batch, query), embeds, past)
            expected = outcome(theirs, *args, sliding_window=window)
            assert same(outcome(mine, *args, sliding_window=window), expected), (name, batch, query, past, window)


def test_a_4d_mask_of_the_wrong_shape_raises_as_4_51():
    embeds, bad = torch.zeros(1, 2, 4), torch.ones(1, 1, 2, 3)
    mine = outcome(MASK._prepare_4d_causal_attention_mask, bad, (1, 2), embeds, 0)
    theirs = outcome(ref_mask._prepare_4d_causal_attention_mask, bad, (1, 2), embeds, 0)
    assert mine == theirs == (ValueError,)


@pytest.mark.parametrize("name", ["_prepare_4d_attention_mask", "_prepare_4d_attention_mask_for_sdpa"])
def test_padding_4d_masks_equal_4_51(name):
    rng = random.Random(7)
    mine, theirs = getattr(MASK, name), getattr(ref_mask, name)
    for _ in range(80):
        batch, keys = rng.randint(1, 3), rng.randint(1, 6)
        mask, dtype, tgt = padding_mask(rng, batch, keys), rng.choice(DTYPES), rng.choice([None, 1, 3])
        assert same(outcome(mine, mask, dtype, tgt_len=tgt), outcome(theirs, mask, dtype, tgt_len=tgt))


def test_create_4d_causal_attention_mask_equals_4_51():
    rng = random.Random(11)
    for _ in range(80):
        shape, past = (rng.randint(1, 3), rng.randint(1, 5)), rng.randint(0, 4)
        dtype, window = rng.choice(DTYPES), rng.choice([None, 1, 2, 5])
        args = (shape, dtype, "cpu", past)
        mine = outcome(MASK._create_4d_causal_attention_mask, *args, sliding_window=window)
        theirs = outcome(ref_mask._create_4d_causal_attention_mask, *args, sliding_window=window)
        assert same(mine, theirs), (shape, past, window)


def test_attention_mask_converter_methods_equal_4_51():
    rng = random.Random(13)
    for _ in range(80):
        causal, window = rng.choice([True, False]), rng.choice([None, 1, 3])
        batch, query, past, dtype = rng.randint(1, 3), rng.randint(1, 5), rng.randint(0, 4), rng.choice(DTYPES)
        mine, theirs = MASK.AttentionMaskConverter, ref_mask.AttentionMaskConverter
        m, t = outcome(mine, causal, sliding_window=window), outcome(theirs, causal, sliding_window=window)
        if isinstance(t, tuple):
            assert same(m, t)
            continue
        assert same(
            outcome(m.to_causal_4d, batch, query, past + query, dtype),
            outcome(t.to_causal_4d, batch, query, past + query, dtype),
        )
        mask = padding_mask(rng, batch, past + query)
        for kv in (past + query, None):
            assert same(
                outcome(m.to_4d, mask, query, dtype, key_value_length=kv),
                outcome(t.to_4d, mask, query, dtype, key_value_length=kv),
            ), (causal, window, batch, query, past, kv)
        args = ((batch, query), dtype, "cpu", past, window)
        assert same(mine._make_causal_mask(*args), theirs._make_causal_mask(*args))
        assert same(mine._expand_mask(mask, dtype, query), theirs._expand_mask(mask, dtype, query))
        expanded = theirs._expand_mask(mask, dtype, query)
        minimum = torch.finfo(dtype).min
        assert same(mine._unmask_unattended(expanded, minimum), theirs._unmask_unattended(expanded, minimum))
        embeds = torch.zeros(batch, query, 2, dtype=dtype)
        for attention, training in itertools.product((None, mask, torch.ones(batch, past + query)), (False, True)):
            kwargs = dict(past_key_values_length=past, sliding_window=window, is_training=training)
            assert mine._ignore_causal_mask_sdpa(attention, embeds, **kwargs) == theirs._ignore_causal_mask_sdpa(
                attention, embeds, **kwargs
            ), (attention, training, past, window)


def test_torch_helpers_removed_in_4_31_give_what_4_30_gave_on_this_torch():
    """4.51.3 has neither: the reference is 4.30's definition, written out (`is_torch_greater_or_equal_than_1_10` read
    the torch version; `torch_int_div` floored on every torch >= 1.8)."""
    from packaging import version

    helpers = vendor("torch_compat")
    parsed = version.parse(version.parse(torch.__version__).base_version)
    assert helpers.is_torch_greater_or_equal_than_1_10 is (parsed >= version.parse("1.10"))
    generator = torch.Generator().manual_seed(0)
    a = torch.randint(-50, 50, (64,), generator=generator)
    b = torch.randint(1, 7, (64,), generator=generator) * torch.where(torch.rand(64, generator=generator) < 0.5, -1, 1)
    floored = torch.tensor([x // y for x, y in zip(a.tolist(), b.tolist())])  # Python's floor division
    assert torch.equal(helpers.torch_int_div(a, b), floored)
    assert torch.equal(helpers.torch_int_div(a, 3), torch.tensor([x // 3 for x in a.tolist()]))


def test_is_torch_fx_available_equals_4_51():
    assert COMPAT.is_torch_fx_available() == ref_import.is_torch_fx_available()


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"rope_theta": 500000.0}, {"rope_scaling": {"type": "linear", "factor": 2.0}},
     {"rope_theta": 1234.5, "rope_scaling": {"type": "dynamic", "rope_type": "dynamic", "factor": 4.0}}],
)  # fmt: skip
def test_rope_helpers_read_what_a_4_51_config_says(kwargs):
    """No 4.51 function has these names: on 4.51 they must give the config attributes themselves."""
    config = transformers.LlamaConfig(**kwargs)
    assert COMPAT.legacy_rope_theta(config) == config.rope_theta
    assert COMPAT.legacy_rope_scaling(config) == config.rope_scaling


def test_rope_scaling_with_only_rope_type_gains_the_legacy_type_key():
    """The one difference from the attribute: a 4.51 config written with only "rope_type" (which legacy code,
    reading ["type"], fails on) is given the "type" key too."""
    config = transformers.LlamaConfig(rope_scaling={"rope_type": "dynamic", "factor": 4.0})
    assert "type" not in config.rope_scaling
    assert COMPAT.legacy_rope_scaling(config) == {**config.rope_scaling, "type": "dynamic"}


def test_device_map_helpers_equal_4_51():
    rng = random.Random(17)
    for _ in range(200):
        layers, devices = rng.randint(1, 12), list(range(rng.randint(1, 5)))
        assert ref_parallel.get_device_map(layers, devices) == PARALLEL.get_device_map(layers, devices)
        device_map = {d: [rng.randrange(layers + 2) for _ in range(rng.randint(0, 4))] for d in devices}
        if rng.random() < 0.3:
            device_map = ref_parallel.get_device_map(layers, devices)
        assert same(
            outcome(PARALLEL.assert_device_map, device_map, layers, message=True),
            outcome(ref_parallel.assert_device_map, device_map, layers, message=True),
        ), (device_map, layers)


def test_find_pruneable_heads_and_indices_equals_4_51():
    rng = random.Random(19)
    for _ in range(200):
        n_heads, size = rng.randint(1, 6), rng.randint(1, 4)
        pruned = {h for h in range(n_heads) if rng.random() < 0.3}
        heads = [rng.randrange(n_heads) for _ in range(rng.randint(0, 4))]
        mine = PRUNING.find_pruneable_heads_and_indices(list(heads), n_heads, size, set(pruned))
        theirs = ref_pytorch.find_pruneable_heads_and_indices(list(heads), n_heads, size, set(pruned))
        assert mine[0] == theirs[0] and same(mine[1], theirs[1])


@pytest.mark.parametrize("dim", [0, 1])
def test_prune_conv1d_layer_equals_4_51(dim):
    torch.manual_seed(23)
    for _ in range(10):
        layer = ref_pytorch.Conv1D(6, 4)
        torch.nn.init.normal_(layer.weight)
        torch.nn.init.normal_(layer.bias)
        index = torch.randperm(layer.weight.shape[dim])[:3].sort().values
        mine, theirs = PRUNING.prune_conv1d_layer(layer, index, dim=dim), ref_pytorch.prune_conv1d_layer(
            layer, index, dim=dim
        )
        assert type(mine) is type(theirs) and mine.nf == theirs.nf
        assert same(mine.weight.data, theirs.weight.data) and same(mine.bias.data, theirs.bias.data)
        assert mine.weight.requires_grad and mine.bias.requires_grad


class _Tensors(torch.nn.Module):
    """A module with a buffer or a plain tensor attribute but no parameter (or nothing at all)."""

    def __init__(self, kind):
        super().__init__()
        if kind == "buffer":
            self.register_buffer("scale", torch.ones(2, dtype=torch.float16))
        elif kind == "attribute":
            self.table = torch.zeros(3, device="meta")
        elif kind == "child":
            self.inner = _Tensors("attribute")


@pytest.mark.parametrize(
    "module",
    [
        lambda: torch.nn.Linear(2, 3),
        lambda: torch.nn.Linear(2, 3, device="meta"),
        lambda: torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(2, 3, device="meta")),
        lambda: _Tensors("buffer"),
        lambda: _Tensors("attribute"),
        lambda: _Tensors("child"),
        lambda: _Tensors("none"),
    ],
)
def test_get_parameter_device_equals_4_51(module):
    built = module()
    assert outcome(DEVICE.get_parameter_device, built) == outcome(ref_get_parameter_device, built)


SUMMARY_CONFIGS = [
    dict(summary_type=kind, summary_use_proj=proj, summary_proj_to_labels=labels, summary_activation=act,
         summary_first_dropout=0.1, summary_last_dropout=0.2)
    for kind, proj, labels, act in itertools.product(
        ["last", "first", "mean", "cls_index"], [False, True], [False, True], [None, "tanh", "gelu"]
    )
]  # fmt: skip


@pytest.mark.parametrize("index", range(0, len(SUMMARY_CONFIGS), 1))
def test_sequence_summary_equals_4_51(index):
    config = transformers.GPT2Config(n_embd=8, num_labels=3, **SUMMARY_CONFIGS[index])
    torch.manual_seed(index)
    theirs = RefSequenceSummary(config).eval()
    mine = SUMMARY.SequenceSummary(config).eval()
    assert list(mine.state_dict()) == list(theirs.state_dict())  # checkpoints load either way
    mine.load_state_dict(theirs.state_dict())
    hidden = torch.randn(2, 5, 8)
    cls_index = torch.tensor([1, 4])
    for argument in (None, cls_index):
        assert same(mine(hidden, argument), theirs(hidden, argument))
    if config.summary_type != "cls_index":
        return
    multiple = torch.randn(2, 3, 5, 8), torch.tensor([[0, 4, 2], [1, 1, 3]])  # (batch, choices, seq, hidden)
    assert same(mine(*multiple), theirs(*multiple))
    assert same(mine(multiple[0]), theirs(multiple[0]))


def _method(rule: str):
    template = tomllib.loads((REPO / "rules" / "5" / f"{rule}.toml").read_text())["params"]["template"]
    namespace = {"torch": torch}
    exec(textwrap.dedent(template), namespace)  # noqa: S102 - the rule's own method
    return next(v for k, v in namespace.items() if callable(v) and k != "torch")


@pytest.fixture(scope="module")
def model():
    return transformers.GPT2Model(transformers.GPT2Config(n_layer=2, n_embd=8, n_head=2, vocab_size=11))


def test_get_head_mask_of_cm440_equals_4_51(model):
    mine = _method("CM440")
    torch.manual_seed(29)
    for mask in (None, torch.rand(2), torch.rand(3, 2), torch.rand(1, 1, 2)):
        for chunked in (False, True):
            expected = outcome(model.get_head_mask, mask, 3, is_attention_chunked=chunked)
            got = outcome(mine, model, mask, 3, is_attention_chunked=chunked)
            if isinstance(expected, tuple) and isinstance(expected[0], type):  # 4.51 asserts, CM440 raises
                assert isinstance(got, tuple) and got[0] is ValueError
            else:
                assert same(got, expected)


def test_invert_attention_mask_of_cm441_equals_4_51(model):
    mine = _method("CM441")
    rng = random.Random(31)
    for _ in range(20):
        batch, keys = rng.randint(1, 3), rng.randint(1, 5)
        mask2 = padding_mask(rng, batch, keys)
        mask3 = torch.stack([padding_mask(rng, batch, keys) for _ in range(2)], dim=1)
        for mask in (mask2, mask3):
            assert same(mine(model, mask), model.invert_attention_mask(mask))


@pytest.mark.parametrize("decoder", [False, True])
def test_get_extended_attention_mask_of_cm442_equals_4_51(decoder):
    """Encoder and decoder configs, 2D masks (with a past: more keys than queries) and 3D masks, float32 and the
    dtype passed in; a 1D mask raises ValueError in both."""
    config = transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=11)
    config.is_decoder = decoder
    model = transformers.GPT2Model(config)
    mine = _method("CM442")
    rng = random.Random(37)
    for _ in range(20):
        batch, queries = rng.randint(1, 3), rng.randint(1, 4)
        keys = queries + rng.randint(0, 3)
        mask2 = padding_mask(rng, batch, keys)
        mask3 = torch.stack([padding_mask(rng, batch, keys) for _ in range(queries)], dim=1)
        for mask in (mask2, mask3):
            for dtype in (None, torch.float16):
                expected = model.get_extended_attention_mask(mask, (batch, queries), dtype=dtype)
                assert same(mine(model, mask, (batch, queries), dtype=dtype), expected)
    flat = torch.ones(3)
    assert outcome(mine, model, flat, (1, 3)) == outcome(model.get_extended_attention_mask, flat, (1, 3))


@pytest.mark.parametrize("torchscript", [False, True])
def test_tie_or_clone_weights_of_cm443_equals_4_51(torchscript):
    """An output projection with a shorter bias and fewer outputs than the embedding has rows, and one without bias:
    tied (the same Parameter) or cloned (equal, not the same), the bias padded with zeros, `out_features` set, as
    4.51's `PreTrainedModel._tie_or_clone_weights` does."""
    mine = _method("CM443")
    config = transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=11, torchscript=torchscript)
    model = transformers.GPT2Model(config)
    for bias in (True, False):
        results = []
        for tie in (mine, type(model)._tie_or_clone_weights):
            torch.manual_seed(41)
            embedding, output = torch.nn.Embedding(11, 8), torch.nn.Linear(8, 9, bias=bias)
            tie(model, output, embedding)
            results.append((embedding, output))
        (embedding, output), (ref_embedding, ref_output) = results
        assert (output.weight is embedding.weight) == (ref_output.weight is ref_embedding.weight) == (not torchscript)
        assert same(output.weight.data, ref_output.weight.data) and output.out_features == ref_output.out_features
        assert (output.bias is None) == (ref_output.bias is None) == (not bias)
        assert output.bias is None or same(output.bias.data, ref_output.bias.data)


def test_torch_float_equals_4_51_outside_and_inside_tracing():
    """4.x's meaning, which 5.x changed (`float(x)`): an int for a number or a 0-d tensor, a float32 tensor while
    tracing."""
    from transformers.utils import generic as ref_generic

    for value in (8**0.5, 3, 7.9, torch.tensor(16.0) ** 0.5):
        ours, theirs = COMPAT.torch_float(value), ref_generic.torch_float(value)
        assert type(ours) is type(theirs) and ours == theirs

    def scale(x):
        return x / COMPAT.torch_float(torch.tensor(x.shape[-1]) ** 0.5)

    def ref_scale(x):
        return x / ref_generic.torch_float(torch.tensor(x.shape[-1]) ** 0.5)

    x = torch.randn(2, 9, generator=torch.Generator().manual_seed(0))
    assert torch.equal(torch.jit.trace(scale, x)(x), torch.jit.trace(ref_scale, x)(x))
