"""Finding the model classes of a modeling module, and building an (original, migrated) pair of tiny models.

:func:`discover` finds the config class, the causal-LM head and the base model of the ORIGINAL module;
:func:`matching_classes` finds the same classes in the MIGRATED module. :func:`build_pair` instantiates both from
one tiny config (see :mod:`.tiny`) and loads one state_dict into both, so that they hold the same weights.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass

from .compare import one_line
from .side_inputs import IMAGE_LAYOUTS, image_layout, with_side_inputs
from .tiny import tiny_config, vocab_of
from .weights import initialise


@dataclass
class ModelClasses:
    """The classes of one modeling module that the probe drives."""

    config_class: type
    head_class: type | None  # a GenerationMixin causal-LM head, or None
    base_class: type  # the model holding the blocks; what the head wraps as ``base_model``
    module_name: str
    seq2seq_class: type | None = None  # an encoder-decoder head (its forward takes ``decoder_input_ids``), or None

    @property
    def decoder_only(self) -> bool:
        """The base model (or head) runs on ``input_ids`` alone; an encoder-decoder base model does not."""
        return self.head_class is not None or self.seq2seq_class is None

    @property
    def model_class(self) -> type:
        """The class that is instantiated: the head when there is one."""
        return self.head_class or self.base_class


def _defined_here(module) -> list[type]:
    from transformers import PreTrainedModel

    return [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, PreTrainedModel) and obj.__module__ == module.__name__
    ]


def _is_generation_head(cls) -> bool:
    """True when a class of the module itself makes ``cls`` a generation head.

    Up to transformers 4.51 PreTrainedModel inherits GenerationMixin, so ``issubclass`` alone would call every model
    a head; the heads are the classes that (re)declare it, e.g. ``class GPT2LMHeadModel(GPT2PreTrainedModel,
    GenerationMixin)``, or, in files written before 4.45 (``class LlamaForCausalLM(LlamaPreTrainedModel)``), the
    classes that define their own ``prepare_inputs_for_generation``: that is how those releases told a head, and
    their ``generate()`` still works on a runtime whose PreTrainedModel inherits GenerationMixin.
    """
    from transformers import GenerationMixin, PreTrainedModel

    library = (PreTrainedModel, GenerationMixin, object)
    hooks = ("prepare_inputs_for_generation", "_reorder_cache")  # a head that defines them generates
    for klass in cls.__mro__:
        if klass in library:
            continue
        if GenerationMixin in klass.__bases__:
            return True
        if any(hook in vars(klass) for hook in hooks) and issubclass(cls, GenerationMixin):
            return True
    return False


def _forward_params(cls) -> list[str]:
    return list(inspect.signature(cls.forward).parameters)[1:]


def _config_candidates(cls) -> list[type]:
    """The config classes a model class may be built from: its own ``config_class``, then that config's
    sub-configs (CLVP's head declares ``ClvpConfig`` but is built from its ``decoder_config``, a
    ``ClvpDecoderConfig``)."""
    from transformers import PretrainedConfig

    declared = cls.config_class
    subs = [c for c in (getattr(declared, "sub_configs", None) or {}).values() if isinstance(c, type)]
    return [declared] + [c for c in subs if issubclass(c, PretrainedConfig) and c is not declared]


def config_class_named(cls, name: str | None) -> type:
    """The config class called ``name`` among those ``cls`` may be built from (:func:`_config_candidates`), else
    ``cls.config_class``: the migrated side of a cross-version probe is built from the config class the original
    was (CLVP's head declares ``ClvpConfig``; built from that, its generation config takes the composite's end
    token)."""
    named = [c for c in _config_candidates(cls) if c.__name__ == name]
    return named[0] if named else cls.config_class


def _head_config(head) -> tuple[type, object]:
    """The first config class whose tiny config builds ``head`` (Bark's sub-models and CLVP's decoder are
    configured apart from the whole model), and the model built; the first error when none does."""
    first = None
    for config_class in _config_candidates(head):
        try:
            return config_class, head(tiny_config(config_class))
        except Exception as exc:  # noqa: BLE001 - a config that does not fit this head: try the next one
            first = first or exc
    raise first


def _runs_on_tokens(model) -> None:
    """One tiny forward on ``input_ids`` alone, without a cache (raises when the model needs more)."""
    import torch

    tokens = torch.randint(1, max(2, vocab_of(model.config) - 1), (1, 3), generator=torch.Generator().manual_seed(0))
    extra = {"use_cache": False} if "use_cache" in _forward_params(type(model)) else {}
    with torch.no_grad():
        model.eval()(input_ids=tokens, **extra)


def _text_head(causal: list[type]) -> type:
    """The causal head to drive: the one with the fewest forward parameters that a tiny config builds and that
    runs on ``input_ids`` alone. A multimodal head that needs ``pixel_values`` (Kosmos-2's
    ``Kosmos2ForConditionalGeneration``) gives way to the text decoder of the same file, built from its own config
    class (``Kosmos2TextForCausalLM``, ``Kosmos2TextConfig``). A file with no such decoder (IDEFICS) gets its head
    with side inputs filled in (:func:`.side_inputs.with_side_inputs`). When none runs, the first, so that its error
    is the one reported."""
    ordered = sorted(causal, key=lambda c: len(_forward_params(c)))
    for cls in ordered:
        if _runs(cls):
            return cls
    for cls in ordered:  # no head runs on tokens alone (IDEFICS): one that runs with side inputs (see .side_inputs)
        for layout in IMAGE_LAYOUTS:
            adapted = with_side_inputs(cls, layout)
            if adapted is cls:
                break
            if _runs(adapted):
                return adapted
    return ordered[0]


def _runs(cls) -> bool:
    try:
        _runs_on_tokens(_head_config(cls)[1])
    except Exception:  # noqa: BLE001 - this head needs more than tokens
        return False
    return True


def with_input_ids(cls) -> type:
    """``cls``, or when its forward names its token ids otherwise (``TrajectoryTransformerModel.forward(self,
    trajectories, past_key_values, ...)``), a subclass of the same name whose forward takes them as ``input_ids``
    (by keyword or, as before, first by position): every check calls the model with ``input_ids=``. The weights,
    the other parameters and the code that runs are the class's own; both sides of a probe get the same adapter."""
    params = _forward_params(cls)
    if "input_ids" in params or not params or params[0] in ("past_key_values", "attention_mask"):
        return cls
    first, run = params[0], cls.forward
    signature = inspect.signature(run)
    renamed = [p.replace(name="input_ids") if p.name == first else p for p in signature.parameters.values()]

    def forward(self, *args, input_ids=None, **kwargs):
        if input_ids is not None:
            kwargs[first] = input_ids
        return run(self, *args, **kwargs)

    forward.__signature__ = signature.replace(parameters=renamed)
    namespace = {"forward": forward, "__module__": cls.__module__, "__qualname__": cls.__qualname__}
    return type(cls.__name__, (cls,), namespace)


def discover(module) -> ModelClasses:
    """Find the config class, the causal-LM head (if any) and the base model of a modeling module."""
    models = _defined_here(module)
    configs = [c.config_class for c in models if getattr(c, "config_class", None) is not None]
    if not configs:
        raise LookupError(f"{module.__name__}: no PreTrainedModel subclass with a config_class")
    common = max(set(configs), key=configs.count)
    with_past = [c for c in models if "past_key_values" in _forward_params(c)]
    heads = [c for c in with_past if _is_generation_head(c)]
    seq2seq = [c for c in heads if "decoder_input_ids" in _forward_params(c)]
    causal = [c for c in heads if c not in seq2seq]
    head = _text_head(causal) if causal else None
    seq2seq_head = min(seq2seq, key=lambda c: len(_forward_params(c))) if seq2seq else None
    if head is not None or seq2seq_head is not None:
        config_class, model = _head_config(head or seq2seq_head)
        return ModelClasses(config_class, head, type(model.base_model), module.__name__, seq2seq_head)
    return _base_model(with_past, common, module.__name__)


def _holds_blocks(model) -> bool:
    """True when the model's own modules include a ModuleList (its blocks), held directly (GPT-2's ``h``) or in a
    module of its own (Bert's ``encoder.layer``); not the blocks of another model it wraps (a PreTrainedModel held as
    a sub-model, as a vision-and-text model holds its text model)."""
    from torch import nn
    from transformers import PreTrainedModel

    todo = list(model.children())
    while todo:
        part = todo.pop()
        if isinstance(part, nn.ModuleList):
            return True
        if not isinstance(part, PreTrainedModel):
            todo.extend(part.children())
    return False


def _base_model(with_past: list[type], common: type, module_name: str) -> ModelClasses:
    """The first class taking ``past_key_values`` that is its own base model and holds its blocks, built from the
    first of its config classes (its own ``config_class``, then that config's sub-configs, then ``common``, the
    config most classes of the file declare) whose tiny config builds it: the text model of a vision-and-text file
    is built from the text config (``AltRobertaModel`` from ``AltCLIPTextConfig``)."""
    failures = []
    for cls in with_past:
        candidates = _config_candidates(cls)
        for config_class in candidates + [common] * (common not in candidates):
            try:
                model = cls(tiny_config(config_class))
            except Exception as exc:  # noqa: BLE001 - a config that does not fit this class: try the next one
                failures.append(f"{cls.__name__} from {config_class.__name__}: {one_line(exc)}")
                continue
            if model.base_model is model and _holds_blocks(model):
                return ModelClasses(config_class, None, with_input_ids(cls), module_name)
            break  # built, but wraps another model or holds no blocks: not a base model, whatever its config
    tried = f" (no tiny config builds {'; '.join(failures)})" if failures else ""
    raise LookupError(
        f"{module_name}: no base model with a ModuleList of blocks and a past_key_values argument{tried}"
    )


def matching_classes(original: ModelClasses, module) -> ModelClasses:
    """The migrated module's classes: the same names as the original's, else discovered afresh."""
    try:
        head = getattr(module, original.head_class.__name__) if original.head_class else None
        layout = image_layout(original.head_class) if original.head_class else None
        head = with_side_inputs(head, layout) if layout else head  # the same side inputs as the original's head
        base = getattr(module, original.base_class.__name__)
        base = base if head else with_input_ids(base)
        seq2seq = getattr(module, original.seq2seq_class.__name__) if original.seq2seq_class else None
        named = [c for c in _config_candidates(head or base) if c.__name__ == original.config_class.__name__]
        return ModelClasses(named[0] if named else base.config_class, head, base, module.__name__, seq2seq)
    except AttributeError:
        return discover(module)


def build_original(classes: ModelClasses, config, seed: int):
    """The original model, from ``seed``, in eval mode; a tensor the file leaves uninitialised is set from the seed
    (:func:`.weights.initialise`)."""
    import torch

    torch.manual_seed(seed)
    model = classes.model_class(copy.deepcopy(config))
    initialise(model, seed)
    return model.eval()


def build_like(classes: ModelClasses, reference, config, seed: int = 0):
    """A model of ``classes`` holding the weights of ``reference`` (strictly: same parameter names), in eval mode.

    ``config`` is the reference's config; it is converted when ``classes`` has its own config class (a migrated
    remote-code folder has its own copy of the configuration module).
    """
    if classes.config_class is type(config):
        own = copy.deepcopy(config)
    else:
        own = classes.config_class.from_dict(config.to_dict())
        own._attn_implementation = config._attn_implementation
    model = classes.model_class(own)
    initialise(model, seed)  # the buffers a state_dict does not hold (non-persistent ones)
    model.load_state_dict(reference.state_dict(), strict=True)
    return model.eval()


def build_pair(original: ModelClasses, migrated: ModelClasses, config, seed: int):
    """(original model, migrated model) with one shared state_dict, in eval mode."""
    reference = build_original(original, config, seed)
    return reference, build_like(migrated, reference, config, seed)
