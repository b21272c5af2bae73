"""Heads over library models: a ``PreTrainedModel`` subclass that builds a model of the installed transformers in
its ``__init__`` (``self.transformer = GPT2Model(config)``, the class known from its import) and hands it the past
(TTS inference heads, draft and reasoning heads). The file has no attention, block or model of its own: the cache is
the library model's, made and updated by it. What the head owns is migrated (its presence tests, ``_reorder_cache``,
``GenerationMixin``, the past handed on); what it hands the library model is whatever that release's model takes.

:func:`library_heads` finds them, by what the file imports and builds, never by a model's name:

- the class derives, directly or through classes of the file, from a ``*PreTrainedModel`` the file imports from
  ``transformers`` (the library's ``PreTrainedModel`` itself counts);
- its ``__init__`` builds ``self.<attr> = X(...)`` with ``X`` imported from ``transformers``, a model class
  (the library's name of ``X`` ends in ``Model``, not ``PreTrainedModel``; an alias, ``transformers.GPT2Model`` or
  ``modeling_gpt2.GPT2Model`` are read through the imports, :mod:`.library_imports`) or a model's stack of layers
  (``Encoder``, ``Decoder``: ``self.encoder = BertEncoder(config)``, a head that embeds and masks itself and hands the
  library's layers the past), or a model an auto class builds (``self.language_model =
  AutoModelForCausalLM.from_config(config.text_config)``: a model of the library, whichever the config names; an
  encoder-decoder one, :data:`ENCODER_DECODER`, is marked so: its layers' past is four tensors), directly or through
  a local of the ``__init__`` (``generator = AutoModelForSeq2SeqLM.from_config(config.generator)`` under ``if
  generator is None:``, then ``self.generator = generator``; the auto class may be imported inside the ``__init__``);
- its ``forward`` hands a cache variable to ``self.<attr>(...)``.

A file of transformers' own tree reaches the library with relative imports (``from ..bert.modeling_bert import
BertEncoder``, ``from ...modeling_utils import PreTrainedModel``): they count (``library_names(tree=True)``), as
they resolve to the installed transformers when the file runs as one of its modules.
"""

from __future__ import annotations

import dataclasses

import libcst as cst
import libcst.matchers as m

from .. import diagnostics as codes
from ..diagnostics import Diagnostic
from ..excerpts import source_line
from ..traverse import findall
from ..views.names import dotted
from .library_imports import library_names, resolve
from .model import ClassInfo

# how the library's names of the modules a head may wrap end: a model, or a model's stack of layers
MODULES = ("Model", "Encoder", "Decoder")
STACKS = ("Encoder", "Decoder")
# the auto classes' constructors: ``AutoModelForCausalLM.from_config(config.text_config)`` builds a model of the library
AUTO_BUILDERS = ("from_config", "from_pretrained")
# auto classes that build encoder-decoder models (``AutoModelForSeq2SeqLM``, ``AutoModelForSpeechSeq2Seq``): a
# layer's past is four tensors there (its cross-attention's too), which a DynamicCache cannot hold (4.54+ read only
# two per layer into one: `from_legacy_cache` raises): such a head is `encoder_decoder`, role `library_seq2seq`, and
# its rules hand the model an EncoderDecoderCache
ENCODER_DECODER = ("Seq2Seq",)


@dataclasses.dataclass(frozen=True)
class LibraryHead:
    """A head of the file over a model of the installed transformers."""

    name: str  # the head class
    attribute: str  # ``self.<attribute>`` holds the library model
    model: str  # the library model's class, as the file names it (``GPT2Model``)
    module: str  # the module it is imported from (``transformers``, ``transformers.models.gpt2.modeling_gpt2``)
    # the forward's statement that hands the past to the library model: its index in the forward's body, and the
    # name it binds the model's outputs to (``outputs = self.transformer(...)``; None for any other statement)
    handoff: int | None = None
    outputs: str | None = None
    # the model is an encoder-decoder one an auto class builds (:data:`ENCODER_DECODER`): four tensors per layer
    encoder_decoder: bool = False

    @property
    def stack(self) -> bool:
        """The library module is a model's stack of layers (an ``nn.Module``), not a model: it has no
        ``_supports_cache_class`` to read. A model an auto class builds (``AutoModelForCausalLM.from_config``) is a
        model."""
        return self.model.endswith(STACKS)


def _library_pretrained(cls: ClassInfo, classes: dict[str, ClassInfo], names: dict[str, str]) -> bool:
    """The class derives from a ``*PreTrainedModel`` imported from transformers, directly or through file classes."""
    seen: set[str] = set()
    todo = list(cls.bases)
    while todo:
        base = todo.pop()
        if base in seen:
            continue
        seen.add(base)
        if base in classes:
            todo.extend(classes[base].bases)
        else:
            library, name = resolve(base, names)
            if library is not None and name.endswith("PreTrainedModel"):
                return True
    return False


def _library_model(cls: ClassInfo, names: dict[str, str]) -> tuple[str, str, str] | None:
    """(attribute, class as the file writes it, library module) of the first library model the class builds and its
    forward hands a past: built into the attribute, or into a local of ``__init__`` the attribute is set to."""
    forward = cls.methods.get("forward")
    if forward is None or not forward.cache_params:
        return None
    handed = forward.passes_to_self_attr()
    init = cls.methods.get("__init__")
    through, names = _through_locals(init.node, names) if init is not None else ([], names)
    for attribute, built in [*cls.submodules.items(), *through]:
        library, name = resolve(built, names)
        model = library is not None and name.endswith(MODULES) and not name.endswith("PreTrainedModel")
        model = model or (library is not None and _auto_built(library, name))
        if model and f"self.{attribute}" in handed:
            return attribute, built, library
    return None


def _through_locals(init: cst.FunctionDef, names: dict[str, str]) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """((attribute, a constructor as written) for each ``self.<attribute> = <local>`` of ``init`` and each call
    ``init`` assigns that local, in any branch: ``generator = AutoModelForSeq2SeqLM.from_config(config.generator)``;
    ``names`` with the library imports of ``init`` itself: ``from ..auto.modeling_auto import AutoModelForSeq2SeqLM``
    inside it)."""
    built_local = m.Assign(targets=[m.AssignTarget(m.Name())], value=m.Call(func=m.Name() | m.Attribute()))
    built: dict[str, list[str]] = {}
    for assign in findall(init.body, built_local):
        built.setdefault(assign.targets[0].target.value, []).append(dotted(assign.value.func))
    to_attr = m.Assign(targets=[m.AssignTarget(m.Attribute(value=m.Name("self"), attr=m.Name()))], value=m.Name())
    through = [
        (assign.targets[0].target.attr.value, call)
        for assign in findall(init.body, to_attr)
        for call in built.get(assign.value.value, [])
    ]
    return through, ({**names, **library_names(init.body, tree=True)} if through else names)


def _auto_built(library: str, name: str) -> bool:
    """``library.name`` is an auto class's constructor (``transformers.AutoModelForCausalLM`` . ``from_config``): the
    model it builds is one of the library's, whichever the config names."""
    auto = library.rsplit(".", 1)[-1]
    return name in AUTO_BUILDERS and auto.startswith("AutoModel")


def _encoder_decoder(library: str, name: str) -> bool:
    """An auto class's constructor that builds an encoder-decoder model (:data:`ENCODER_DECODER`)."""
    return _auto_built(library, name) and any(kind in library.rsplit(".", 1)[-1] for kind in ENCODER_DECODER)


def library_heads(module: cst.Module, classes: dict[str, ClassInfo]) -> list[LibraryHead]:
    """The heads of the file over library models (see the module's docstring), in file order."""
    names = library_names(module, tree=True)
    found = []
    for cls in classes.values():
        if not _library_pretrained(cls, classes, names):
            continue
        wrapped = _library_model(cls, names)
        if wrapped is not None:
            attribute, model, library = wrapped
            index, outputs = handoff(cls.methods["forward"].node, attribute)
            seq2seq = _encoder_decoder(library, model.rsplit(".", 1)[-1])
            found.append(LibraryHead(cls.name, attribute, model, library, index, outputs, seq2seq))
    return found


def pretrained_bases(classes: dict, heads: list[str]) -> list[str]:
    """The classes of the file that the classes ``heads`` derive from, directly or through each other, other than
    the heads themselves (file order)."""
    found: set[str] = set()
    todo = [base for name in heads for base in classes[name].bases]
    while todo:
        base = todo.pop()
        if base in classes and base not in found and base not in heads:
            found.add(base)
            todo.extend(classes[base].bases)
    return [name for name in classes if name in found]


def generating_heads(classes: dict, pretrained: list[str], known: list[str]) -> list[str]:
    """Classes of the file deriving from one of ``pretrained`` (not one of them, nor in ``known``) that define a
    generation hook (``prepare_inputs_for_generation``, ``_reorder_cache``): heads, in file order."""
    found: list[str] = []
    for name, cls in classes.items():
        if name in pretrained or name in known:
            continue
        seen, todo = set(), list(cls.bases)
        while todo:
            base = todo.pop()
            if base in seen or base not in classes:
                continue
            seen.add(base)
            todo.extend(classes[base].bases)
        hooks = "prepare_inputs_for_generation" in cls.methods or "_reorder_cache" in cls.methods
        if hooks and seen & set(pretrained):
            found.append(name)
    return found


def handoff(function: cst.FunctionDef, attribute: str) -> tuple[int | None, str | None]:
    """(index, name) of the first top-level statement of ``function`` that calls ``self.<attribute>(...)``, and the
    name it binds when it is ``name = self.<attribute>(...)``."""
    call = m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name(attribute)))
    bound = m.SimpleStatementLine([m.Assign(targets=[m.AssignTarget(m.Name())], value=call)])
    for index, stmt in enumerate(function.body.body):
        if findall(stmt, call):
            return index, stmt.body[0].targets[0].target.value if m.matches(stmt, bound) else None
    return None, None


def handed_keyword(function: cst.FunctionDef, attribute: str, keyword: str) -> cst.BaseExpression | None:
    """What the first call of ``self.<attribute>(...)`` in ``function`` hands as ``keyword=`` (None where the call
    is not found or hands nothing under that name)."""
    call = m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name(attribute)))
    for found in findall(function.body, call):
        return next((arg.value for arg in found.args if arg.keyword is not None and arg.keyword.value == keyword), None)
    return None


def head_of(info, class_name: str | None) -> LibraryHead | None:
    """The library head named ``class_name`` of the analysed module, if it is one."""
    return next((head for head in info.library_heads if head.name == class_name), None)


def late_presence_tests(info) -> list[tuple[LibraryHead, object]]:
    """(head, use) for each test of the past's presence in a head's forward that comes after the statement handing
    the past to the library model: a tuple model gave back a new tuple and left the head's own untouched, but a
    library model fills the Cache it is handed in place, so after the call no test tells the first step any more."""
    found = []
    for head in info.library_heads:
        forward = info.classes[head.name].methods["forward"]
        if head.handoff is None:
            continue
        later = forward.node.body.body[head.handoff + 1 :]
        names = {node for stmt in later for node in findall(stmt, m.Name())}
        found.extend((head, use) for use in forward.uses if use.kind == "check" and use.node in names)
    return found


def late_presence_diagnostics(info, path: str, locate) -> list:
    """CM900 at each test of :func:`late_presence_tests`, saying why and what to do instead."""
    result = []
    for head, use in late_presence_tests(info):
        line, column = locate(use.node)
        excerpt = source_line(locate.code, line)
        message = (
            f"{head.name}.forward tests whether it was handed a past (`{excerpt}`) after handing it to "
            f"`self.{head.attribute}` ({head.model} of the installed transformers): that model fills a Cache in place, "
            "so after the call the test no longer tells the first step (a tuple was given back as a new one and "
            f"left `{use.variable}` as it was); the file was left unchanged. Test it once before the call and keep "
            f"the answer (`first_step = {use.variable} is None`), then run cachemigrate again"
        )
        result.append(Diagnostic(path, line, column, codes.UNKNOWN_IDIOM, message))
    return result
