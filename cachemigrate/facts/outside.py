"""Why a file with tuple-cache code has no attention, block or model of its own (or none that this file alone can
migrate). These shapes are common in the wild, and none can be migrated from the file alone:

- a head over an in-library model (TTS stacks: ``class MelHead(GPT2PreTrainedModel)`` around ``GPT2Model``): on
  releases where the library model takes a Cache, generate() hands the head a Cache from the first step, so the
  head's ``if past_key_values:`` and tuple ``_reorder_cache`` must be ported to that release's generate();
- a monkeypatch (``modeling_gpt2.GPT2Attention.forward = my_forward``): the function replaces library code whose
  signature and cache changes with the release;
- a package whose attention or blocks live in sibling modules (MPT-style ``attention.py``/``blocks.py`` imported
  with ``from .attention import ...``): cachemigrate migrates one file at a time, and half a migration (a stack
  that hands a Cache to an attention that indexes a tuple) would be wrong;
- a wrapper around a model it builds with an auto class (Fuyu's ``AutoModelForCausalLM.from_config(...)``, RAG's
  generator): the cache is that model's, migrated in that model's own file;
- a cache of dicts (fairseq ports such as FSMT: ``layer_state = past_key_values[idx]``, then
  ``layer_state.get("self", {})["prev_key"]``): the per-layer past is not a KV tuple at all.

:func:`explain` names the shape, so that the diagnostic says what to do instead of "no structure was recognised".
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from .analysis import ModuleInfo
from .uses import CacheUse


def _library_base(bases: list[str], classes: dict) -> str | None:
    """A base the file does not define, named as transformers names its pretrained-model classes."""
    for base in bases:
        if base not in classes and base.rsplit(".", 1)[-1].endswith("PreTrainedModel"):
            return base
    return None


def _patched_attribute(module: cst.Module, function: str) -> str | None:
    """``X.forward`` when the module assigns the top-level function ``function`` to an attribute."""
    for stmt in module.body:
        for assign in m.findall(stmt, m.Assign(value=m.Name(function))):
            for target in assign.targets:
                if isinstance(target.target, cst.Attribute):
                    return module.code_for_node(target.target)
    return None


def _sibling_classes(module: cst.Module) -> list[tuple[str, str]]:
    """(name, ``.module``) of each class-like name imported from a sibling module (one dot: the file's own
    package; ``...modeling_utils`` in a transformers model is the library) and called in the file."""
    imported = {}
    for node in m.findall(module, m.ImportFrom(relative=[m.Dot()])):
        if isinstance(node.names, cst.ImportStar):
            continue
        source = "." + (module.code_for_node(node.module) if node.module else "")
        for alias in node.names:
            name = module.code_for_node(alias.asname.name if alias.asname else alias.name)
            if name[:1].isupper() and not name.endswith(("Config", "Output", "OutputWithPast")):
                imported[name] = source
    called = {node.func.value for node in m.findall(module, m.Call(func=m.Name()))}
    return [(name, source) for name, source in imported.items() if name in called]


def _auto_models(module: cst.Module) -> list[str]:
    """``AutoModelForCausalLM.from_config``... when the module builds models with ``AutoModel*`` classes (their
    ``from_config`` calls, else their ``from_pretrained`` calls), each once."""
    auto = m.Name(m.MatchRegex(r"AutoModel\w*"))
    found = [
        module.code_for_node(call.func)
        for call in m.findall(
            module, m.Call(func=m.Attribute(value=auto, attr=m.Name("from_config") | m.Name("from_pretrained")))
        )
    ]
    built = [f for f in found if f.endswith(".from_config")] or found
    return list(dict.fromkeys(built))


def _per_layer_names(module: cst.Module, cache: str) -> set[str]:
    """Names assigned one layer's past: ``x = cache[i]`` or ``x = cache[i] if cache is not None else None``."""
    picked = m.Subscript(value=m.Name(cache))
    found = m.findall(module, m.Assign(targets=[m.AssignTarget(target=m.Name())], value=picked | m.IfExp(body=picked)))
    return {node.targets[0].target.value for node in found}


def _dict_use(module: cst.Module, names: set[str]) -> str | None:
    """The code of the first use of one of ``names`` as a dict: ``x.get(...)``, ``x["key"]``, ``x[k] = {...}``."""
    name = m.Name(m.MatchIfTrue(lambda value: value in names))
    as_dict = (
        m.Call(func=m.Attribute(value=name, attr=m.Name("get")))
        | m.Subscript(value=name, slice=[m.SubscriptElement(slice=m.Index(value=m.SimpleString()))])
        | m.Assign(targets=[m.AssignTarget(target=m.Subscript(value=name))], value=m.Dict())
    )
    first = next(iter(m.findall(module, as_dict)), None)
    return module.code_for_node(first).splitlines()[0] if first is not None else None


def explain(module: cst.Module, info: ModuleInfo, use: CacheUse) -> str | None:
    """What the tuple use ``use`` belongs to, when it is one of the shapes above; None otherwise."""
    owner = use.function.split(".", 1)[0]
    cls = info.classes.get(owner)
    if cls is not None and "." in use.function:
        base = _library_base(cls.bases, info.classes)
        if base:
            return (
                f"{owner} subclasses `{base}` of the installed transformers and wraps its model; cachemigrate "
                "migrates models whose attention and layers are in the file, not heads over a library model. On "
                "releases where that model takes a Cache, generate() passes this head a Cache from the first step: "
                f'port `{use.function}` by hand (a Cache\'s truth value is not "has a past"; use '
                "`past_key_values.get_seq_length()` and `Cache.reorder_cache`), or migrate a copy of the model's file "
                "together with it"
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
    auto = _auto_models(module)
    if auto:
        named = " or ".join(f"`{name}`" for name in auto[:3])
        return (
            f"the file wraps a model it builds with {named} and hands it the past: the cache is that model's, and "
            "that model's own file is what migrates; port this tuple code by hand to whatever the wrapped model "
            "returns (`past_key_values.get_seq_length()` for a length, `Cache.reorder_cache` for beams)"
        )
    siblings = _sibling_classes(module)
    if siblings:
        named = ", ".join(f"`{name}` (from `{source}`)" for name, source in siblings[:3])
        return (
            f"the file builds {named}, defined in another module of its package; cachemigrate migrates one file at "
            "a time and does not yet migrate attention and blocks split over several files together (half of it "
            "would hand a Cache to code that indexes a tuple): move those classes into this file and run it again, "
            "or port the package by hand"
        )
    return None
