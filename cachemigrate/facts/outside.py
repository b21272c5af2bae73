"""Why a file with tuple-cache code has no attention, block or model of its own (or none that this file alone can
migrate). These shapes are common in the wild, and none can be migrated from the file alone:

- a head over an in-library model (TTS stacks: ``class MelHead(GPT2PreTrainedModel)`` around ``GPT2Model``): on
  releases where the library model takes a Cache, generate() hands the head a Cache from the first step, so the
  head's ``if past_key_values:`` and tuple ``_reorder_cache`` must be ported to that release's generate();
- a monkeypatch (``modeling_gpt2.GPT2Attention.forward = my_forward``): the function replaces library code whose
  signature and cache changes with the release;
- a package whose attention or blocks live in sibling modules (MPT-style ``attention.py``/``blocks.py`` imported
  with ``from .attention import ...``, or ``from attention import ...`` in a remote-code folder's style), or in
  another model's file (4.6's BertGeneration: ``from ..bert.modeling_bert import BertEncoder``): cachemigrate
  migrates one file at a time, and half a migration (a stack that hands a Cache to an attention that indexes a
  tuple) would be wrong;
- a wrapper around a model it builds with an auto class (Fuyu's ``AutoModelForCausalLM.from_config(...)``, RAG's
  generator): the cache is that model's, migrated in that model's own file;
- a cache of dicts (fairseq ports such as FSMT: ``layer_state = past_key_values[idx]``, then
  ``layer_state.get("self", {})["prev_key"]``): the per-layer past is not a KV tuple at all.

:func:`explain` names the shape, so that the diagnostic says what to do instead of "no structure was recognised".
"""

from __future__ import annotations

import sys

import libcst as cst
import libcst.matchers as m

from .analysis import ModuleInfo
from .custom_reorder import custom_reorder, custom_reorder_message
from .uses import CacheUse
from ..traverse import findall


def _library_base(bases: list[str], classes: dict) -> str | None:
    """A base the file does not define, named as transformers names its pretrained-model classes (a model's,
    ``GPT2PreTrainedModel``: ``PreTrainedModel`` itself is every model's base and wraps nothing)."""
    for base in bases:
        name = base.rsplit(".", 1)[-1]
        if base not in classes and name.endswith("PreTrainedModel") and name != "PreTrainedModel":
            return base
    return None


def _own_stack(info: ModuleInfo) -> tuple[str, str] | None:
    """(model, block) where a class of the file holds an ``nn.ModuleList`` of another class of the file."""
    for cls in info.classes.values():
        for block in cls.module_lists.values():
            if block in info.classes:
                return cls.name, block
    return None


def _patched_attribute(module: cst.Module, function: str) -> str | None:
    """``X.forward`` when the module assigns the top-level function ``function`` to an attribute."""
    for stmt in module.body:
        for assign in findall(stmt, m.Assign(value=m.Name(function))):
            for target in assign.targets:
                if isinstance(target.target, cst.Attribute):
                    return module.code_for_node(target.target)
    return None


# Absolute imports of a remote-code folder's own modules: the folder's companions are named by transformers'
# conventions (`configuration_x.py` beside `modeling_x.py`); no library is named so.
_COMPANION = ("configuration_", "modeling_", "tokenization_", "processing_", "image_processing_")
# Top-level packages remote modeling code imports absolutely that are libraries, not modules of its folder.
LIBRARIES = frozenset(
    {"transformers", "torch", "einops", "flash_attn", "xformers", "triton", "numpy", "accelerate", "deepspeed"}
    | {"apex", "safetensors", "tokenizers", "sentencepiece", "timm", "torchvision", "torchaudio", "bitsandbytes"}
    | set(getattr(sys, "stdlib_module_names", ()))
)


def _sibling_sources(module: cst.Module) -> dict[cst.ImportFrom, str]:
    """Each ``from <sibling> import ...`` of the module, with the sibling as written: relative with one dot (the
    file's own package; ``...modeling_utils`` in a transformers model is the library), or absolute in a
    remote-code folder's style, where the file imports a companion module absolutely (``from configuration_x
    import XConfig``: the folder's modules are imported by their bare names), for a one-word module that is no
    library (:data:`LIBRARIES`)."""
    found = {}
    absolute = []
    for node in findall(module, m.ImportFrom()):
        if isinstance(node.names, cst.ImportStar):
            continue
        if m.matches(node, m.ImportFrom(relative=[m.Dot()])):
            found[node] = "." + (module.code_for_node(node.module) if node.module else "")
        elif _other_model(node):  # `from ..bert.modeling_bert import BertEncoder`: another model's file
            found[node] = ".." + module.code_for_node(node.module)
        elif not node.relative and isinstance(node.module, cst.Name):
            absolute.append(node)
    if any(node.module.value.startswith(_COMPANION) for node in absolute):
        for node in absolute:
            if node.module.value not in LIBRARIES:
                found[node] = node.module.value
    return found


def _other_model(node: cst.ImportFrom) -> bool:
    """``from ..<model>.modeling_<model> import ...``: a transformers model's file importing another model's
    (4.6's BertGeneration builds BERT's encoder); two dots up from ``models/<name>/`` is ``models/``."""
    if len(node.relative) != 2 or not isinstance(node.module, cst.Attribute):
        return False
    return isinstance(node.module.attr, cst.Name) and node.module.attr.value.startswith("modeling_")


def _sibling_classes(module: cst.Module) -> list[tuple[str, str]]:
    """(name, module as written) of each class-like name imported from a sibling module (:func:`_sibling_sources`)
    and called in the file."""
    imported = {}
    for node, source in _sibling_sources(module).items():
        for alias in node.names:
            name = module.code_for_node(alias.asname.name if alias.asname else alias.name)
            if name[:1].isupper() and not name.endswith(("Config", "Output", "OutputWithPast")):
                imported[name] = source
    called = {node.func.value for node in findall(module, m.Call(func=m.Name()))}
    return [(name, source) for name, source in imported.items() if name in called]


def _auto_models(module: cst.Module) -> list[str]:
    """``AutoModelForCausalLM.from_config``... when the module builds models with ``AutoModel*`` classes (their
    ``from_config`` calls, else their ``from_pretrained`` calls), each once."""
    auto = m.Name(m.MatchRegex(r"AutoModel\w*"))
    found = [
        module.code_for_node(call.func)
        for call in findall(
            module, m.Call(func=m.Attribute(value=auto, attr=m.Name("from_config") | m.Name("from_pretrained")))
        )
    ]
    built = [f for f in found if f.endswith(".from_config")] or found
    return list(dict.fromkeys(built))


def _per_layer_names(module: cst.Module, cache: str) -> set[str]:
    """Names assigned one layer's past: ``x = cache[i]`` or ``x = cache[i] if cache is not None else None``."""
    picked = m.Subscript(value=m.Name(cache))
    found = findall(module, m.Assign(targets=[m.AssignTarget(target=m.Name())], value=picked | m.IfExp(body=picked)))
    return {node.targets[0].target.value for node in found}


def _dict_use(module: cst.Module, names: set[str]) -> str | None:
    """The code of the first use of one of ``names`` as a dict: ``x.get(...)``, ``x["key"]``, ``x[k] = {...}``."""
    name = m.Name(m.MatchIfTrue(lambda value: value in names))
    as_dict = (
        m.Call(func=m.Attribute(value=name, attr=m.Name("get")))
        | m.Subscript(value=name, slice=[m.SubscriptElement(slice=m.Index(value=m.SimpleString()))])
        | m.Assign(targets=[m.AssignTarget(target=m.Subscript(value=name))], value=m.Dict())
    )
    first = next(iter(findall(module, as_dict)), None)
    return module.code_for_node(first).splitlines()[0] if first is not None else None


def explain(module: cst.Module, info: ModuleInfo, use: CacheUse) -> str | None:
    """What the tuple use ``use`` belongs to, when it is one of the shapes above; None otherwise."""
    owner = use.function.split(".", 1)[0]
    cls = info.classes.get(owner)
    # a file that stacks layers of its own wraps no model, whatever its classes derive from
    stack = _own_stack(info)
    if cls is not None and "." in use.function and stack is None:
        base = _library_base(cls.bases, info.classes)
        if base:
            return (
                f"{owner} subclasses `{base}` of the installed transformers and wraps a model, but its forward hands "
                "the past to no model it builds in its `__init__` from a model class imported from transformers "
                "(`self.transformer = GPT2Model(config)`): cachemigrate migrates a head over a library model only "
                "when it can tell which library model takes the past. On releases where that model takes a Cache, "
                f"generate() passes this head a Cache from the first step: port `{use.function}` by hand (a Cache's "
                'truth value is not "has a past"; use `past_key_values.get_seq_length()` and '
                "`Cache.reorder_cache`), build the model in `__init__` from its transformers class, or migrate a copy "
                "of the model's file together with it"
            )
    if "." not in use.function:
        patched = _patched_attribute(module, use.function)
        if patched:
            return (
                f"the function {use.function} is assigned to `{patched}`: a monkeypatch of library code, whose "
                "signature and cache change with the release; port it by hand to the `forward` of the installed "
                "transformers, or copy the patched class into the file so that it can be migrated with its model"
            )
    as_dict = _dict_use(module, _per_layer_names(module, use.variable))
    if as_dict:
        return (
            f"one layer's past is a dict (`{as_dict}`), fairseq style, not a tuple of keys and values: cachemigrate "
            "migrates tuple KV caches only; port this cache by hand (an `EncoderDecoderCache` holds the self- and "
            "cross-attention keys and values per layer), or keep the model on its dicts"
        )
    auto = _auto_models(module) if stack is None else []
    if auto:
        named = " or ".join(f"`{name}`" for name in auto[:3])
        method = cls.methods.get(use.function.split(".", 1)[1]) if cls is not None and "." in use.function else None
        tops = {stmt.name.value for stmt in module.body if isinstance(stmt, cst.FunctionDef)}
        reorder = custom_reorder(method.node, tops) if method is not None and method.name == "_reorder_cache" else None
        if reorder:
            return custom_reorder_message(owner, method.name, reorder, named)
        return (
            f"the file wraps a model it builds with {named} and hands it the past: the cache is that model's, and "
            "that model's own file is what migrates; port this tuple code by hand to whatever the wrapped model "
            "returns (`past_key_values.get_seq_length()` for a length, `Cache.reorder_cache` for beams)"
        )
    siblings = _sibling_classes(module)
    if siblings:
        named = ", ".join(f"`{name}` (from `{source}`)" for name, source in siblings[:3])
        other_model = all(source.startswith("..") for _, source in siblings)
        where = "another model's file" if other_model else "another module of its package"
        return (
            f"the file builds {named}, defined in {where}; cachemigrate migrates one file at "
            "a time and does not yet migrate attention and blocks split over several files together (half of it "
            "would hand a Cache to code that indexes a tuple): move those classes into this file and run it again, "
            "or port the package by hand"
        )
    if stack and not info.roles["base_model"]:
        model, block = stack
        return (
            f"the file defines its own layers ({model} holds a list of {block}) and hands them the past under "
            "names that are not cache names of this era, so no attention, block or model taking a cache was found: "
            "rename those parameters to a cache name of the era (`cache_names` in its `era.toml`: `layer_past`, "
            "`past_key_value`...) and run it again"
        )
    return None
