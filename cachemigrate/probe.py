"""Equivalence probe: run an ORIGINAL and a MIGRATED modeling file side by side and compare them.

Both files are imported (see :func:`load_modeling_module`), a tiny random model is built from the file's config class
with a fixed seed, and one state_dict is loaded into the original-module model and the migrated-module model. A
matrix of checks (see :data:`CHECK_NAMES`) then feeds both the same inputs and compares the outputs, bit for bit
unless a check says otherwise.

torch and transformers are imported lazily, inside functions: importing this module is cheap.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import hashlib
import importlib.machinery
import importlib.util
import inspect
import logging
import random
import re
import sys
import time
import types
import warnings
from dataclasses import dataclass
from pathlib import Path

CHECK_NAMES = (
    "logits_no_cache",
    "tuple_cache_stepwise",
    "use_cache_false_with_past",
    "tuple_in_tuple_out",
    "dynamic_cache_in_same_object",
    "generate_greedy",
    "generate_beam",
    "left_padding",
    "output_attentions",
    "return_dict_false",
    "sdpa",
    "gradient_checkpointing",
    "positional_call",
    "jit_trace_tuple",
    "static_generate",
    "static_compile",
)

PROMPT_LEN = 5
STEPS = 3
MAX_NEW_TOKENS = 6


@dataclass
class CheckResult:
    """The outcome of one check."""

    name: str
    status: str  # "pass" | "fail" | "skip" | "error"
    detail: str = ""
    seconds: float = 0.0


class CheckFailed(Exception):
    """Raised by a check when the migrated model behaves differently."""


class CheckSkipped(Exception):
    """Raised by a check that does not apply to this model."""


# --------------------------------------------------------------------------------------------------------------------
# Loading modeling files
# --------------------------------------------------------------------------------------------------------------------


def load_modeling_module(path, *, package: str | None = None, alias: str | None = None) -> types.ModuleType:
    """Import the modeling file at ``path`` under a unique module name and return the module.

    - A file with parent-relative imports (``from ...activations import``), as copied out of transformers, is loaded
      inside a transformers package, ``transformers.models.<name>`` guessed from ``modeling_<name>.py`` unless
      ``package`` is given, as ``<package>.<alias>``.
    - A file whose folder holds a ``configuration_*.py`` (remote-code style) is loaded as ``<stem>`` inside a fresh,
      uniquely named package whose ``__path__`` is that folder, so ``from .configuration_x import XConfig`` works.
    - Any other file is loaded as a top-level module named ``alias`` (prefixed with ``_cm_`` if it is not already).

    ``alias`` defaults to ``_cm_`` plus a hash of the path and contents. Loading the same file twice with two aliases
    gives two independent modules (own classes), which is what lets an original and a migrated copy live side by side.
    """
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no such modeling file: {path}")
    source = path.read_text(encoding="utf-8")
    tag = alias or "_cm_" + hashlib.sha1(f"{path}\0{source}".encode()).hexdigest()[:12]
    levels = [node.level for node in ast.walk(ast.parse(source, str(path))) if isinstance(node, ast.ImportFrom)]
    owned: list[str] = []

    if package is not None:
        _require_package(package, path)
        name = f"{package}.{tag}"
    elif max(levels, default=0) >= 2 or (levels and not _sibling_configs(path)):
        name = f"{_guess_transformers_package(path)}.{tag}"
    elif _sibling_configs(path):
        pkg = _make_folder_package(path.parent, tag)
        owned.append(pkg)
        name = f"{pkg}.{path.stem}"
    else:
        name = tag if tag.startswith("_cm_") else f"_cm_{tag}"  # never shadow a real top-level module
    owned.insert(0, name)
    module = _exec_file(name, path, owned)
    module.__cm_owned__ = tuple(owned)
    return module


def unload_module(module: types.ModuleType) -> None:
    """Remove a module loaded by :func:`load_modeling_module` (and its private package) from ``sys.modules``."""
    for name in getattr(module, "__cm_owned__", (module.__name__,)):
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]


def _sibling_configs(path: Path) -> list[Path]:
    return sorted(path.parent.glob("configuration_*.py"))


def _require_package(package: str, path: Path) -> None:
    try:
        found = package in sys.modules or importlib.util.find_spec(package) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        raise ModuleNotFoundError(f"cannot load {path.name}: package {package!r} is not importable")


def _guess_transformers_package(path: Path) -> str:
    """``modeling_gpt2.py`` -> ``transformers.models.gpt2``; trailing ``_suffix`` parts are dropped until one exists."""
    match = re.fullmatch(r"modeling_(\w+)", path.stem)
    if not match:
        raise ValueError(
            f"cannot guess the transformers package for {path.name}: it uses relative imports but is not named "
            "modeling_<name>.py; pass package='transformers.models.<name>'"
        )
    parts = match.group(1).split("_")
    tried = []
    for end in range(len(parts), 0, -1):
        candidate = "transformers.models." + "_".join(parts[:end])
        tried.append(candidate)
        try:
            if importlib.util.find_spec(candidate) is not None:
                return candidate
        except ModuleNotFoundError:  # transformers itself is missing
            break
    raise ModuleNotFoundError(
        f"cannot load {path.name}: it uses relative imports, so it must be imported inside a transformers package, "
        f"but none of {', '.join(tried)} exists in the installed transformers; pass package=..."
    )


def _make_folder_package(folder: Path, tag: str) -> str:
    """Register a bare package (its ``__init__`` is not run) whose ``__path__`` is ``folder``."""
    name = f"_cm_pkg{tag}" if tag.startswith("_") else f"_cm_pkg_{tag}"
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    sys.modules[name] = importlib.util.module_from_spec(spec)
    return name


def _exec_file(name: str, path: Path, owned: list[str]) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        for key in owned:
            sys.modules.pop(key, None)
        raise
    return module


# --------------------------------------------------------------------------------------------------------------------
# Discovering the model classes and building the tiny models
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class ModelClasses:
    """The classes of one modeling module that the probe drives."""

    config_class: type
    head_class: type | None  # a GenerationMixin causal-LM head, or None
    base_class: type  # the model holding the blocks; what the head wraps as ``base_model``
    module_name: str

    @property
    def model_class(self) -> type:
        """The class that is instantiated: the head when there is one."""
        return self.head_class or self.base_class


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


def _defined_here(module) -> list[type]:
    from transformers import PreTrainedModel

    return [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, PreTrainedModel) and obj.__module__ == module.__name__
    ]


def _is_generation_head(cls) -> bool:
    """True when a class of the module itself lists GenerationMixin as a base.

    Up to transformers 4.51 PreTrainedModel inherits GenerationMixin, so ``issubclass`` alone would call every model
    a head; the heads are the classes that (re)declare it, e.g. ``class GPT2LMHeadModel(GPT2PreTrainedModel,
    GenerationMixin)``.
    """
    from transformers import GenerationMixin, PreTrainedModel

    return any(GenerationMixin in klass.__bases__ for klass in cls.__mro__ if klass is not PreTrainedModel)


def _forward_params(cls) -> list[str]:
    return list(inspect.signature(cls.forward).parameters)[1:]


def discover(module) -> ModelClasses:
    """Find the config class, the causal-LM head (if any) and the base model of a modeling module."""
    from torch import nn

    models = _defined_here(module)
    configs = [c.config_class for c in models if getattr(c, "config_class", None) is not None]
    if not configs:
        raise LookupError(f"{module.__name__}: no PreTrainedModel subclass with a config_class")
    config_class = max(set(configs), key=configs.count)
    with_past = [c for c in models if "past_key_values" in _forward_params(c)]
    heads = [c for c in with_past if _is_generation_head(c)]
    head = min(heads, key=lambda c: len(_forward_params(c))) if heads else None
    if head is not None:
        base = type(head(tiny_config(config_class)).base_model)
        return ModelClasses(config_class, head, base, module.__name__)
    for cls in with_past:
        model = cls(tiny_config(config_class))
        if model.base_model is model and any(isinstance(m, nn.ModuleList) for m in model.children()):
            return ModelClasses(config_class, None, cls, module.__name__)
    raise LookupError(f"{module.__name__}: no base model with a ModuleList of blocks and a past_key_values argument")


def _matching_classes(original: ModelClasses, module) -> ModelClasses:
    """The migrated module's classes: the same names as the original's, else discovered afresh."""
    try:
        head = getattr(module, original.head_class.__name__) if original.head_class else None
        base = getattr(module, original.base_class.__name__)
        return ModelClasses(base.config_class, head, base, module.__name__)
    except AttributeError:
        return discover(module)


# --------------------------------------------------------------------------------------------------------------------
# Comparison helpers
# --------------------------------------------------------------------------------------------------------------------


def _kind(value) -> str:
    import torch

    if value is None:
        return "None"
    if isinstance(value, torch.Tensor):
        return "Tensor"
    return type(value).__name__


def tensor_diff(a, b) -> str | None:
    """None when ``a`` and ``b`` are bit-identical, else a one-line description of the difference."""
    import torch

    if a.shape != b.shape:
        return f"shape {tuple(a.shape)} vs {tuple(b.shape)}"
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} vs {b.dtype}"
    if torch.equal(a, b):
        return None
    if a.is_floating_point():
        both_nan = torch.isnan(a) & torch.isnan(b)
        if not both_nan.any() or not torch.equal(a[~both_nan], b[~both_nan]):
            return f"max abs diff {(a.double() - b.double()).abs().nan_to_num(float('inf')).max().item():.3e}"
        return None
    return f"{int((a != b).sum())} of {a.numel()} elements differ"


def structure_diff(a, b, where: str = "out") -> str | None:
    """Compare two nested outputs (tensors, tuples, lists, ModelOutputs/dicts) by structure and value."""
    import torch

    if _kind(a) != _kind(b) and not (isinstance(a, dict) and isinstance(b, dict)):
        return f"{where}: {_kind(a)} vs {_kind(b)}"
    if isinstance(a, torch.Tensor):
        diff = tensor_diff(a, b)
        return f"{where}: {diff}" if diff else None
    if isinstance(a, dict):
        if list(a.keys()) != list(b.keys()):
            return f"{where}: keys {list(a.keys())} vs {list(b.keys())}"
        items = [(f"{where}.{k}", a[k], b[k]) for k in a]
    elif isinstance(a, (tuple, list)):
        if len(a) != len(b):
            return f"{where}: length {len(a)} vs {len(b)}"
        items = [(f"{where}[{i}]", x, y) for i, (x, y) in enumerate(zip(a, b))]
    else:
        return None if a == b else f"{where}: {a!r} vs {b!r}"
    for sub_where, x, y in items:
        diff = structure_diff(x, y, sub_where)
        if diff:
            return diff
    return None


def _expect_same(a, b, what: str) -> None:
    diff = structure_diff(a, b, what)
    if diff:
        raise CheckFailed(diff)


def _logits(output):
    """Logits of a head, or the last hidden state of a base model; works on ModelOutputs and tuples."""
    if isinstance(output, tuple):
        return output[0]
    logits = getattr(output, "logits", None)
    return logits if logits is not None else output.last_hidden_state


def _past(output):
    return output[1] if isinstance(output, tuple) else getattr(output, "past_key_values", None)


def _clone(value):
    """Copy of a nested tuple/list of tensors (e.g. a legacy past), so that neither model sees the other's tensors."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_clone(v) for v in value)
    return value


def _layout(value) -> str:
    """Short description of a nested output, e.g. ``tuple[Tensor, tuple[2]]``."""
    if isinstance(value, (tuple, list)):
        inner = ", ".join(_kind(v) if not isinstance(v, (tuple, list)) else f"{_kind(v)}[{len(v)}]" for v in value)
        return f"{_kind(value)}[{inner}]"
    return _kind(value)


# --------------------------------------------------------------------------------------------------------------------
# The probe context
# --------------------------------------------------------------------------------------------------------------------


def _seed_all(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    with contextlib.suppress(ImportError):
        import numpy

        numpy.random.seed(seed)


class _Probe:
    """Holds both modules' classes, the seed and the models built so far; the checks take one of these."""

    def __init__(self, original_module, migrated_module, *, static: bool | None, seed: int):
        self.orig = discover(original_module)
        self.migr = _matching_classes(self.orig, migrated_module)
        self.static = static
        self.seed = seed
        self.vocab_size = tiny_config(self.orig.config_class).vocab_size
        self._pairs: dict = {}

    # -- models ------------------------------------------------------------------------------------------------------

    def pair(self, attn: str = "eager", *, torchscript: bool = False, fresh: bool = False):
        """(original model, migrated model) with one shared state_dict, in eval mode. Cached unless ``fresh``."""
        key = (attn, torchscript)
        if fresh or key not in self._pairs:
            built = self._build_pair(attn, torchscript)
            if fresh:
                return built
            self._pairs[key] = built
        return self._pairs[key]

    def _build_pair(self, attn: str, torchscript: bool):
        import torch

        config = tiny_config(self.orig.config_class, attn=attn, torchscript=torchscript)
        torch.manual_seed(self.seed)
        original = self.orig.model_class(copy.deepcopy(config)).eval()
        if self.migr.config_class is self.orig.config_class:
            migrated_config = copy.deepcopy(config)
        else:
            migrated_config = self.migr.config_class.from_dict(config.to_dict())
            migrated_config._attn_implementation = attn
        migrated = self.migr.model_class(migrated_config)
        migrated.load_state_dict(original.state_dict(), strict=True)
        return original, migrated.eval()

    @property
    def has_head(self) -> bool:
        return self.orig.head_class is not None

    # -- inputs ------------------------------------------------------------------------------------------------------

    def ids(self, batch: int, length: int, salt: int = 0):
        """Random token ids in [1, vocab_size - 1): 0 is the pad id, vocab_size - 1 is ImageGPT's start token."""
        import torch

        generator = torch.Generator().manual_seed(self.seed * 1000 + salt)
        return torch.randint(1, self.vocab_size - 1, (batch, length), generator=generator)

    def prompt_and_steps(self, salt: int = 0):
        """A batch-2 prompt of PROMPT_LEN tokens and STEPS single-token continuations."""
        tokens = self.ids(2, PROMPT_LEN + STEPS, salt)
        return tokens[:, :PROMPT_LEN], [tokens[:, PROMPT_LEN + i :][:, :1] for i in range(STEPS)]

    def original_past(self, model, prompt):
        """The ORIGINAL model's returned past for ``prompt`` (legacy layout)."""
        return _past(model(input_ids=prompt, use_cache=True))


# --------------------------------------------------------------------------------------------------------------------
# The checks. Each takes a _Probe and returns a one-line detail, or raises CheckFailed / CheckSkipped.
# --------------------------------------------------------------------------------------------------------------------


def _no_cache_logits(probe: _Probe, attn: str) -> str:
    original, migrated = probe.pair(attn)
    ids = probe.ids(2, 7)
    _expect_same(
        _logits(original(input_ids=ids, use_cache=False)), _logits(migrated(input_ids=ids, use_cache=False)), "logits"
    )
    return f"logits {tuple(ids.shape)} bit-identical"


def _stepwise(probe: _Probe, attn: str) -> str:
    original, migrated = probe.pair(attn)
    prompt, steps = probe.prompt_and_steps()
    past_o = past_m = None
    kinds = set()
    for i, tokens in enumerate([prompt, *steps]):
        out_o = original(input_ids=tokens, past_key_values=past_o, use_cache=True)
        out_m = migrated(input_ids=tokens, past_key_values=past_m, use_cache=True)
        _expect_same(_logits(out_o), _logits(out_m), f"step {i} logits")
        past_o, past_m = _past(out_o), _past(out_m)
        kinds.add(_kind(past_m))
    return f"prompt {PROMPT_LEN} + {STEPS} steps bit-identical; migrated past: {'/'.join(sorted(kinds))}"


def check_logits_no_cache(probe: _Probe) -> str:
    """Full forward without a cache."""
    return _no_cache_logits(probe, "eager")


def check_tuple_cache_stepwise(probe: _Probe) -> str:
    """Prompt, then single tokens, each model stepping with the past it returned itself."""
    return _stepwise(probe, "eager")


def check_use_cache_false_with_past(probe: _Probe) -> str:
    """A tuple past with ``use_cache=False``: same logits, and neither model returns a past."""
    original, migrated = probe.pair()
    prompt, steps = probe.prompt_and_steps()
    past = probe.original_past(original, prompt)
    out_o = original(input_ids=steps[0], past_key_values=_clone(past), use_cache=False)
    out_m = migrated(input_ids=steps[0], past_key_values=_clone(past), use_cache=False)
    _expect_same(_logits(out_o), _logits(out_m), "logits")
    for who, out in (("original", out_o), ("migrated", out_m)):
        if _past(out) is not None:
            raise CheckFailed(f"{who} returned a past ({_kind(_past(out))}) with use_cache=False")
    return "logits bit-identical; no past returned"


def check_tuple_in_tuple_out(probe: _Probe) -> str:
    """A tuple past in gives a past out in the original's legacy layout, with equal values."""
    original, migrated = probe.pair()
    prompt, steps = probe.prompt_and_steps()
    past = probe.original_past(original, prompt)
    out_o = original(input_ids=steps[0], past_key_values=_clone(past), use_cache=True)
    out_m = migrated(input_ids=steps[0], past_key_values=_clone(past), use_cache=True)
    _expect_same(_logits(out_o), _logits(out_m), "logits")
    _expect_same(_past(out_o), _past(out_m), "past")
    return f"past {_layout(_past(out_o))} x{len(_past(out_o))} equal"


def _call_under_test(model, **kwargs):
    """Call the model whose Cache support is checked; its exceptions are failures, not probe errors."""
    try:
        return model(**kwargs)
    except Exception as exc:  # noqa: BLE001 - any crash here is the failure being checked for
        raise CheckFailed(f"model raised {_one_line(exc)}") from exc


def _expect_cache_step(out, cache, length: int, reference_logits, what: str) -> None:
    returned = _past(out)
    if returned is not cache:
        raise CheckFailed(f"{what}: returned {_kind(returned)}, not the DynamicCache passed in")
    if cache.get_seq_length() != length:
        raise CheckFailed(f"{what}: get_seq_length() is {cache.get_seq_length()}, expected {length}")
    _expect_same(reference_logits, _logits(out), f"{what} logits")


def check_dynamic_cache_in_same_object(probe: _Probe) -> str:
    """A DynamicCache passed in (empty, or from_legacy_cache) comes back as the same object, grown in place."""
    from transformers.cache_utils import DynamicCache

    original, migrated = probe.pair()
    prompt, steps = probe.prompt_and_steps()
    out = original(input_ids=prompt, use_cache=True)
    reference = [_logits(out)]
    past = _past(out)
    for tokens in steps:
        out = original(input_ids=tokens, past_key_values=past, use_cache=True)
        reference.append(_logits(out))
        past = _past(out)

    cache = DynamicCache()
    for i, tokens in enumerate([prompt, *steps]):
        out = _call_under_test(migrated, input_ids=tokens, past_key_values=cache, use_cache=True)
        _expect_cache_step(out, cache, PROMPT_LEN + i, reference[i], f"empty cache, step {i}")

    legacy = DynamicCache.from_legacy_cache(_clone(probe.original_past(original, prompt)))
    out = _call_under_test(migrated, input_ids=steps[0], past_key_values=legacy, use_cache=True)
    _expect_cache_step(out, legacy, PROMPT_LEN + 1, reference[1], "from_legacy_cache")
    return f"same object, grew to {PROMPT_LEN + STEPS} tokens; logits equal the tuple path"


@contextlib.contextmanager
def _recording_past_types(model):
    """Record the type of ``past_key_values`` that every forward call of ``model`` receives."""
    seen: list[type] = []

    def hook(_module, args, kwargs):
        seen.append(type(kwargs.get("past_key_values", args[1] if len(args) > 1 else None)))

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield seen
    finally:
        handle.remove()


def _generate(model, ids, mask=None, **kwargs):
    import torch

    if mask is None:
        mask = torch.ones_like(ids)
    kwargs.setdefault("num_beams", 1)
    return model.generate(
        ids, attention_mask=mask, max_new_tokens=MAX_NEW_TOKENS, do_sample=False, pad_token_id=0, **kwargs
    )


def _require_head(probe: _Probe) -> None:
    if not probe.has_head:
        raise CheckSkipped("no GenerationMixin head in the module")


def check_generate_greedy(probe: _Probe) -> str:
    """Greedy generate gives the same tokens, and the migrated model is handed a Cache while decoding."""
    from transformers.cache_utils import Cache

    _require_head(probe)
    original, migrated = probe.pair()
    ids = probe.ids(2, PROMPT_LEN)
    expected = _generate(original, ids)
    with _recording_past_types(migrated) as seen:
        got = _generate(migrated, ids)
    _expect_same(expected, got, "tokens")
    if not any(issubclass(t, Cache) for t in seen[1:]):
        names = sorted({t.__name__ for t in seen[1:]})
        raise CheckFailed(f"tokens identical, but the migrated model never received a Cache (got {', '.join(names)})")
    return f"{MAX_NEW_TOKENS} new tokens identical; migrated decoded with {seen[-1].__name__}"


def check_generate_beam(probe: _Probe) -> str:
    """Beam search (3 beams) gives the same tokens."""
    _require_head(probe)
    original, migrated = probe.pair()
    ids = probe.ids(2, PROMPT_LEN)
    _expect_same(_generate(original, ids, num_beams=3), _generate(migrated, ids, num_beams=3), "tokens")
    return f"{MAX_NEW_TOKENS} new tokens identical (3 beams)"


def check_left_padding(probe: _Probe) -> str:
    """A left-padded batch: same no-cache logits at unmasked positions and the same greedy tokens."""
    import torch

    original, migrated = probe.pair()
    ids = probe.ids(2, 7)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    ids[0, :3] = 0
    keep = mask.bool()
    logits_o = _logits(original(input_ids=ids, attention_mask=mask, use_cache=False))
    logits_m = _logits(migrated(input_ids=ids, attention_mask=mask, use_cache=False))
    _expect_same(logits_o[keep], logits_m[keep], "unmasked logits")
    if not probe.has_head:
        return "unmasked logits bit-identical; generate skipped (no head)"
    _expect_same(_generate(original, ids, mask), _generate(migrated, ids, mask), "tokens")
    return "unmasked logits and greedy tokens identical"


def check_output_attentions(probe: _Probe) -> str:
    """Eager attention weights, for the prompt and for one cached step."""
    original, migrated = probe.pair()
    prompt, steps = probe.prompt_and_steps()
    out_o = original(input_ids=prompt, use_cache=True, output_attentions=True)
    out_m = migrated(input_ids=prompt, use_cache=True, output_attentions=True)
    _expect_same(out_o.attentions, out_m.attentions, "prompt attentions")
    step_o = original(input_ids=steps[0], past_key_values=_past(out_o), use_cache=True, output_attentions=True)
    step_m = migrated(input_ids=steps[0], past_key_values=_past(out_m), use_cache=True, output_attentions=True)
    _expect_same(step_o.attentions, step_m.attentions, "cached-step attentions")
    return f"{len(out_o.attentions)} layers identical (prompt and cached step)"


def check_return_dict_false(probe: _Probe) -> str:
    """``return_dict=False, use_cache=True``: the original's tuple layout, past included, with and without a past in.

    Without a past in, the original returned a legacy tuple past, so the migrated model must too (not a Cache).
    """
    original, migrated = probe.pair()
    prompt, steps = probe.prompt_and_steps()
    out_o = original(input_ids=prompt, use_cache=True, return_dict=False)
    out_m = migrated(input_ids=prompt, use_cache=True, return_dict=False)
    _expect_same(out_o, out_m, "no past: out")
    past = _clone(out_o[1])
    step_o = original(steps[0], past_key_values=_clone(past), use_cache=True, return_dict=False)
    step_m = migrated(steps[0], past_key_values=_clone(past), use_cache=True, return_dict=False)
    _expect_same(step_o, step_m, "tuple past: out")
    return f"layout {_layout(out_o)} identical, with and without a past"


def check_sdpa(probe: _Probe) -> str:
    """logits_no_cache and tuple_cache_stepwise again with sdpa attention."""
    if not getattr(probe.orig.model_class, "_supports_sdpa", False):
        raise CheckSkipped(f"{probe.orig.model_class.__name__} does not support sdpa")
    first = _no_cache_logits(probe, "sdpa")
    second = _stepwise(probe, "sdpa")
    return f"{first}; {second}"


def check_gradient_checkpointing(probe: _Probe) -> str:
    """Training step with gradient checkpointing: same loss and gradients, bit for bit."""
    import torch

    if not getattr(probe.orig.model_class, "supports_gradient_checkpointing", False):
        raise CheckSkipped(f"{probe.orig.model_class.__name__} does not support gradient checkpointing")
    ids = probe.ids(2, 7)
    losses, grads = [], []
    for model in probe.pair(fresh=True):
        model.train()
        model.gradient_checkpointing_enable()
        with torch.enable_grad():
            out = model(input_ids=ids, labels=ids) if probe.has_head else model(input_ids=ids)
            loss = out.loss if getattr(out, "loss", None) is not None else _logits(out).square().mean()
            loss.backward()
        losses.append(loss.detach())
        grads.append({name: p.grad for name, p in model.named_parameters()})
    _expect_same(losses[0], losses[1], "loss")
    _expect_same(grads[0], grads[1], "grad")
    return f"loss {losses[0].item():.6f} and {len(grads[0])} parameter grads bit-identical"


def _positional_args(function, values: dict) -> list:
    """Positional arguments for ``function`` (a bound forward) carrying ``values``; gaps get the defaults."""
    params = list(inspect.signature(function).parameters.values())
    last = max(i for i, p in enumerate(params) if p.name in values)
    args = []
    for param in params[: last + 1]:
        if param.kind not in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            raise CheckSkipped(f"{param.name!r} cannot be passed positionally in the original signature")
        default = None if param.default is param.empty else param.default
        args.append(values.get(param.name, default))
    return args


def check_positional_call(probe: _Probe) -> str:
    """Positional calls in the ORIGINAL signature order: (input_ids, past_key_values, attention_mask)."""
    import torch

    original, migrated = probe.pair()
    prompt, steps = probe.prompt_and_steps()
    past = probe.original_past(original, prompt)
    values = {"input_ids": steps[0], "attention_mask": torch.ones(2, PROMPT_LEN + 1, dtype=torch.long)}
    targets = [("base model", original.base_model, migrated.base_model)]
    if probe.has_head:
        targets.append(("head", original, migrated))
    for what, model_o, model_m in targets:
        args = _positional_args(model_o.forward, {**values, "past_key_values": past})
        out_o = model_o(*_clone(args))
        out_m = model_m(*_clone(args))
        _expect_same(out_o, out_m, f"{what} out")
    return f"{' and '.join(t[0] for t in targets)} called with {len(args)} positional args: identical"


def check_jit_trace_tuple(probe: _Probe) -> str:
    """torch.jit.trace with a tuple past; the traced migrated model matches the eager original on new inputs."""
    import torch

    original, migrated = probe.pair(torchscript=True, fresh=True)
    prompt, steps = probe.prompt_and_steps()
    example = {"input_ids": steps[0], "past_key_values": probe.original_past(original, prompt)}
    trace = lambda model: torch.jit.trace(  # noqa: E731
        model, example_kwarg_inputs=_clone(example), strict=False, check_trace=False
    )
    try:
        traced_original = trace(original)
    except Exception as exc:  # noqa: BLE001
        raise CheckSkipped(f"the original cannot be traced: {_one_line(exc)}") from exc
    try:
        traced = trace(migrated)
    except Exception as exc:  # noqa: BLE001
        raise CheckFailed(f"tracing the migrated model failed: {_one_line(exc)}") from exc
    new_prompt, new_steps = probe.prompt_and_steps(salt=7)
    new = {"input_ids": new_steps[0], "past_key_values": probe.original_past(original, new_prompt)}
    eager, got = original(**_clone(new)), traced(**_clone(new))
    diff = structure_diff(eager, got, "traced out")
    if diff is None:
        return "traced migrated model equals eager original on new inputs"
    # Some originals already compute differently once traced (ImageGPT's torch_float scale is int() in eager and a
    # float tensor under tracing). Then the migration is faithful if it traces to what the original traces to.
    reference = traced_original(**_clone(new))
    drift = structure_diff(eager, reference, "traced original")
    if drift and structure_diff(reference, got) is None:
        return f"traced migrated equals traced original; tracing changes the original itself ({drift})"
    raise CheckFailed(diff)


def _require_static(probe: _Probe) -> None:
    flagged = getattr(probe.migr.model_class, "_supports_static_cache", False)
    if probe.static is False or (probe.static is None and not flagged):
        reason = "static=False" if probe.static is False else "migrated model does not set _supports_static_cache"
        raise CheckSkipped(reason)


def check_static_generate(probe: _Probe) -> str:
    """``generate(cache_implementation="static")`` on the migrated model gives the original's greedy tokens, on
    a plain batch and on a left-padded one."""
    import torch
    from transformers.cache_utils import StaticCache

    _require_static(probe)
    _require_head(probe)
    original, migrated = probe.pair()
    ids = probe.ids(2, PROMPT_LEN)
    mask = torch.ones_like(ids)
    padded, padded_mask = ids.clone(), mask.clone()
    padded[0, :2], padded_mask[0, :2] = 0, 0
    for name, (tokens, attention) in {"plain": (ids, mask), "left-padded": (padded, padded_mask)}.items():
        expected = _generate(original, tokens, attention)
        with _recording_past_types(migrated) as seen:
            got = _generate(migrated, tokens, attention, cache_implementation="static")
        _expect_same(expected, got, f"{name} tokens")
        if not any(issubclass(t, StaticCache) for t in seen):
            raise CheckFailed("tokens identical, but the migrated model never received a StaticCache")
    return f"{MAX_NEW_TOKENS} new tokens identical with a StaticCache, plain and left-padded"


def _static_cache(model, batch: int, length: int):
    import torch
    from transformers.cache_utils import StaticCache

    return StaticCache(
        config=model.config, max_batch_size=batch, max_cache_len=length, device="cpu", dtype=torch.float32
    )


def check_static_compile(probe: _Probe) -> str:
    """A decode step of ``torch.compile(model.forward, fullgraph=True)`` (backend "eager": it checks that the
    graph captures whole, not the speed) with a StaticCache matches the eager step, and both match the
    original's tuple-cache step up to float tolerance."""
    import torch

    _require_static(probe)
    original, migrated = probe.pair()
    prompt, steps = probe.prompt_and_steps()
    length = PROMPT_LEN + STEPS + 2
    position = torch.arange(PROMPT_LEN, PROMPT_LEN + 1)
    results = []
    for compiled in (False, True):
        cache = _static_cache(migrated, prompt.shape[0], length)
        migrated(input_ids=prompt, past_key_values=cache, use_cache=True, cache_position=torch.arange(PROMPT_LEN))
        forward = torch.compile(migrated.forward, fullgraph=True, backend="eager") if compiled else migrated.forward
        out = forward(input_ids=steps[0], past_key_values=cache, use_cache=True, cache_position=position)
        results.append(_logits(out))
        torch._dynamo.reset()
    _expect_same(results[0], results[1], "compiled vs eager decode logits")
    reference = _logits(original(input_ids=steps[0], past_key_values=probe.original_past(original, prompt)))
    gap = (reference - results[0]).abs().max().item()
    if gap > 1e-5:
        raise CheckFailed(f"static decode step differs from the original's tuple-cache step by {gap:.3e}")
    return f"fullgraph compiled decode step equals eager; {gap:.1e} from the original's tuple-cache step"


CHECKS = {name: globals()[f"check_{name}"] for name in CHECK_NAMES}


# --------------------------------------------------------------------------------------------------------------------
# Running and reporting
# --------------------------------------------------------------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


@contextlib.contextmanager
def _probe_environment():
    """For the duration of the probe: one torch thread, no Python warnings, logging below ERROR switched off.

    The models are tiny, so intra-op threads only add synchronisation cost (up to 10x slower on a busy machine).
    """
    import torch
    from transformers.utils import logging as hf_logging

    threads, verbosity, disabled = torch.get_num_threads(), hf_logging.get_verbosity(), logging.root.manager.disable
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    logging.disable(logging.WARNING)  # remote-code files log through loggers outside the transformers tree
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(disabled)
        hf_logging.set_verbosity(verbosity)
        torch.set_num_threads(threads)


def _run_check(probe: _Probe, name: str) -> CheckResult:
    import torch

    _seed_all(probe.seed)
    start = time.perf_counter()
    try:
        grad = torch.enable_grad() if name == "gradient_checkpointing" else torch.no_grad()
        with grad:
            status, detail = "pass", CHECKS[name](probe)
    except CheckFailed as exc:
        status, detail = "fail", str(exc)
    except CheckSkipped as exc:
        status, detail = "skip", str(exc)
    except Exception as exc:  # noqa: BLE001 - a crashing check is reported, not raised
        status, detail = "error", _one_line(exc)
    return CheckResult(name, status, detail.replace("\n", " "), time.perf_counter() - start)


def _select(checks: list[str] | None) -> list[str]:
    if checks is None:
        return list(CHECK_NAMES)
    unknown = [c for c in checks if c not in CHECKS]
    if unknown:
        raise ValueError(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(CHECK_NAMES)}")
    return list(checks)


def run_probe(
    original: str | Path,
    migrated: str | Path,
    *,
    checks: list[str] | None = None,
    static: bool | None = None,
    seed: int = 0,
) -> list[CheckResult]:
    """Run the check matrix on ORIGINAL vs MIGRATED; one CheckResult per check in ``checks`` (default: CHECK_NAMES).

    ``static``: None runs static_generate only when the migrated model sets ``_supports_static_cache``, True forces
    it, False skips it. A file that fails to import or whose model classes cannot be found makes every check "error".
    """
    names = _select(checks)
    paths = [Path(p) for p in (original, migrated)]
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"no such modeling file: {path}")
    digest = hashlib.sha1("\0".join(str(p.resolve()) for p in paths).encode()).hexdigest()[:10]
    modules = []
    with _probe_environment():
        try:
            start = time.perf_counter()
            try:
                for role, path in zip(("original", "migrated"), paths):
                    modules.append(load_modeling_module(path, alias=f"_cm_{role}_{digest}"))
                probe = _Probe(*modules, static=static, seed=seed)
            except Exception as exc:  # noqa: BLE001
                detail = f"setup failed: {_one_line(exc)}"
                return [CheckResult(n, "error", detail, time.perf_counter() - start) for n in names]
            return [_run_check(probe, name) for name in names]
        finally:
            for module in modules:
                unload_module(module)


def format_table(results: list[CheckResult]) -> str:
    """Plain-text table: check | status | detail | seconds."""
    header = ("check", "status", "detail", "seconds")
    rows = [(r.name, r.status, r.detail, f"{r.seconds:.2f}") for r in results]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]

    def line(row) -> str:
        cells = [row[i].ljust(widths[i]) for i in range(3)] + [row[3].rjust(widths[3])]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(row) for row in rows)])
