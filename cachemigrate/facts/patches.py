"""Patches of library classes: module-level functions assigned onto a class of the installed transformers
(``GPT2Attention.forward = my_forward``, ``modeling_gpt2.GPT2Attention.forward = my_forward``).

Such a function is no method of the file: the library class it replaces calls it, so its contract (the keyword the
cache comes under, whether that cache is a ``Cache`` the function must ``update(k, v, self.layer_idx)``, what it
returns) is the library's, and it changes with the release. The rules of role ``patch`` (``rules/<era>/CM6*.toml``)
migrate the function to the contract of their era; this module only finds which functions are patches of what.
A class of the file that subclasses a library attention and overrides its ``forward`` (a KV-eviction or
position-shifting variant that a model swaps in for its own attention: ``block.attn = MyAttention(...)``) is called
by the library's blocks just the same: its ``forward`` is a patch too, where the file has no layer stack of its own.

The target is known from the file's imports, never from a name alone: ``GPT2Attention`` counts when the file
imports it from ``transformers`` (or a module of it: ``from transformers.models.gpt2 import modeling_gpt2``), and
its structural role is read off transformers' naming of its classes (an attention class ends in ``Attention``; a
pretrained-model base ends in ``PreTrainedModel``, as :mod:`cachemigrate.facts.outside` reads it).
A patch whose target is not such a class (a class of the file, of another library, or a library model rather than
an attention) is reported by :func:`refusal`, at the assignment, saying what is missing.
"""

from __future__ import annotations

import dataclasses

import libcst as cst
import libcst.matchers as m

from .. import diagnostics as codes
from ..diagnostics import Diagnostic
from ..traverse import findall
from ..views.names import dotted as _dotted
from .library_imports import LIBRARY, library_names, resolve as _resolve
from .model import ClassInfo, FunctionInfo, ModuleInfo

# the library's names of its structural roles (the end of a class name): only attentions are patch targets so far
ROLES = (("Attention", "attention"),)
# The keywords the library's layers have passed an attention its cache under, and what came under each: a patch
# takes its cache under one of them, as the release it was written for passed it (the rules of role `patch` move it
# to the keyword of their era). `layer_past` held the (key, value) tuple (GPT-2 and its family up to 4.51); the
# others a Cache (`past_key_value` 4.36-4.55, `past_key_values` 4.56+, `cache` 5.24+).
KEYWORDS = {"layer_past": "tuple", "past_key_value": "cache", "past_key_values": "cache", "cache": "cache"}


@dataclasses.dataclass(frozen=True)
class Patch:
    function: str  # the module-level function assigned
    target: str  # the attribute as written: `GPT2Attention.forward`
    cls: str | None  # the class it is set on, as the library names it (`GPT2Attention`)
    library: str | None  # the dotted module the class is imported from (`transformers.models.gpt2.modeling_gpt2`)
    node: cst.CSTNode = dataclasses.field(repr=False, compare=False)

    @property
    def role(self) -> str | None:
        """The library class's structural role (``attention``), or None."""
        if self.library is None or self.cls is None:
            return None
        return next((role for suffix, role in ROLES if self.cls.endswith(suffix)), None)


def find_patches(module: cst.Module, functions: dict[str, FunctionInfo]) -> list[Patch]:
    """Every top-level ``<class>.<method> = <function>`` of the file where ``<function>`` is a module-level
    function of the file, in file order."""
    names = library_names(module)
    own = {fn.name for fn in functions.values() if fn.cls is None}
    found = []
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for assign in stmt.body:
            if not (isinstance(assign, cst.Assign) and m.matches(assign.value, m.Name())):
                continue
            if assign.value.value not in own:
                continue
            for target in assign.targets:
                if not isinstance(target.target, cst.Attribute):
                    continue
                owner = _dotted(target.target.value)
                if owner is None:
                    continue
                library, cls = _resolve(owner, names)
                written = f"{owner}.{target.target.attr.value}"
                found.append(Patch(assign.value.value, written, cls, library, stmt))
    return found


def known_contract(fn: FunctionInfo) -> bool:
    """The function takes its cache under a keyword the library passed an attention one (:data:`KEYWORDS`), and uses
    it as what came under that keyword: a tuple, or a Cache (no tuple use)."""
    if not fn.cache_params or fn.cache_params[0] not in KEYWORDS:
        return False
    return KEYWORDS[fn.cache_params[0]] == "tuple" or not fn.legacy()


def patch_functions(module: cst.Module, functions: dict[str, FunctionInfo]) -> list[str]:
    """The module-level functions with a cache parameter that the file patches onto a library attention, under a
    contract the rules know (:func:`known_contract`)."""
    patched = {p.function for p in find_patches(module, functions) if p.role == "attention"}
    return [q for q, fn in functions.items() if fn.cls is None and fn.name in patched and known_contract(fn)]


def library_subclasses(module: cst.Module, classes: dict[str, ClassInfo]) -> list[str]:
    """The classes of the file that subclass a library attention (a base imported from transformers whose name ends
    in ``Attention``) and override its ``forward`` with a cache parameter: the library's blocks call them (a model
    swaps them in for its own attention), so that forward follows the library's contract, as a patched function
    does."""
    names = library_names(module)
    found = []
    for cls in classes.values():
        forward = cls.methods.get("forward")
        if forward is None or not known_contract(forward):
            continue
        for base in cls.bases:
            library, name = _resolve(base, names)
            if library is not None and Patch(forward.name, base, name, library, cls).role == "attention":
                found.append(cls.name)
                break
    return found


def probe_target(module: cst.Module, info: ModuleInfo) -> tuple[str, str | None] | None:
    """(the library module a probe builds the model of, the module-level function that swaps the patch's attention
    into that model, or None where importing the file patches the class) for a file of patches; None otherwise."""
    names = library_names(module)
    for patch in find_patches(module, info.functions):
        if patch.function in {info.functions[q].name for q in info.roles["patch"] if q in info.functions}:
            return patch.library, None
    for qualname in info.roles["patch"]:
        cls = info.classes.get(qualname.split(".")[0])
        if cls is None:
            continue
        library = next((lib for base in cls.bases for lib, _ in [_resolve(base, names)] if lib), None)
        swaps = [
            fn.name
            for fn in info.functions.values()
            if fn.cls is None and findall(fn.node, m.Call(func=m.Name(cls.name)))
        ]
        if library:
            return library, (swaps[0] if swaps else None)
    return None


def refusal(module: cst.Module, functions: dict[str, FunctionInfo], function: str) -> tuple[cst.CSTNode, str] | None:
    """(the assignment, why) where the module-level function ``function`` is assigned onto a class that is no
    library attention known from an import; None where it is not assigned onto any class attribute."""
    for patch in find_patches(module, functions):
        if patch.function != function:
            continue
        if patch.library is None:
            return patch.node, (
                f"the function {function} is assigned to `{patch.target}`, but `{patch.target.split('.')[0]}` is not "
                f"imported from {LIBRARY}: a patch is migrated to the contract of the library class it replaces "
                "(the keyword its cache comes under, a Cache to update with `self.layer_idx`, what it returns), "
                "known from the class's import, and this target's contract is unknown; import the class from "
                f"{LIBRARY} if it is one, else migrate the class this function is set on with its model"
            )
        fn = next((f for f in functions.values() if f.cls is None and f.name == function), None)
        if patch.role == "attention" and fn is not None and fn.cache_params and not known_contract(fn):
            used = fn.cache_params[0]
            return patch.node, (
                f"the function {function} is assigned to `{patch.target}`, a library attention, and takes its cache "
                f"as `{used}` used as a tuple: the library's layers passed an attention its cache as `layer_past` "
                "(a (key, value) tuple) or as a Cache (`past_key_value`, `past_key_values`, `cache`), and a patch is "
                "migrated from the keyword it was called with; this one could never have received a past under that "
                f"name, so what it was written for is not known: rename `{used}` to the keyword of the release it was "
                "written for and run it again"
            )
        if patch.role is None:
            return patch.node, (
                f"the function {function} is assigned to `{patch.target}`, a class of {LIBRARY} "
                f"(`{patch.library}.{patch.cls}`) that is not an attention: cachemigrate migrates patches of library "
                "attentions (a class whose name ends in `Attention`), whose cache contract per release it knows, "
                "not yet patches of library models or blocks; port this function by hand to the installed "
                "transformers' own method"
            )
    return None


def refusal_diagnostic(module: cst.Module, info: ModuleInfo, path: str, locate) -> Diagnostic | None:
    """:data:`codes.PATCH_TARGET` at the assignment of the first module-level function with tuple-cache code that is
    set on a class this module cannot tell the contract of (:func:`refusal`); None where there is none."""
    for use in info.legacy_uses():
        fn = info.functions.get(use.function)
        if fn is None or fn.cls is not None:
            continue
        found = refusal(module, info.functions, fn.name)
        if found:
            node, why = found
            line, column = locate(node)
            return Diagnostic(path, line, column, codes.PATCH_TARGET, f"{why}; the file was left unchanged")
    return None


def unknown_return(function: str, names: set[str], path: str, where: tuple[int, int]) -> Diagnostic:
    """Why a patch is refused whose ``present`` is still read after the rules removed it: it is returned in a form
    the rules do not rewrite to the library's ``(attn_output, attn_weights)``."""
    shown = ", ".join(f"`{name}`" for name in sorted(names))
    return Diagnostic(
        path,
        *where,
        codes.PATCH_TARGET,
        (
            f"{function} is patched onto a library attention, and after the rules ran it still reads {shown}, the "
            "present of the `layer_past` contract, in a form the rules do not rewrite: from 4.56 the library's blocks "
            "unpack `attn_output, attn_weights` from a library attention (its present is the Cache it updated), and this "
            "patch returns its present some other way; return `attn_output, attn_weights` (or `attn_output, present`, "
            "`attn_output, present, attn_weights` as the tuple contract does) and run it again; the file was left unchanged"
        ),
    )
