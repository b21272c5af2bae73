"""The facts' data: what analysis records of a file (its classes, functions and cache uses), shared by the modules
that compute them (analysis, uses, roles) so that none of them imports another for its types."""

from __future__ import annotations

import dataclasses

import libcst as cst

# Attributes that only a Cache object has (a tuple or a tensor has none of them).
CACHE_ONLY_ATTRIBUTES = frozenset(
    {
        "update",
        "get_seq_length",
        "get_usable_length",
        "get_max_cache_shape",
        "get_max_length",
        "reorder_cache",
        "to_legacy_cache",
        "is_updated",
        "self_attention_cache",
        "cross_attention_cache",
        "key_cache",
        "value_cache",
        "has_previous_state",
        "crop",
        "layers",
        "get_mask_sizes",
        "update_conv_state",
    }
)


@dataclasses.dataclass
class CacheUse:
    variable: str
    kind: str  # check | api | pass | alias | legacy
    function: str  # qualified name, e.g. "GPT2Attention.forward"
    idiom: str  # the code of the expression that uses the variable
    statement: str  # the code of the enclosing statement (its header for compound statements)
    node: cst.CSTNode | None = dataclasses.field(default=None, repr=False, compare=False)


@dataclasses.dataclass
class FunctionInfo:
    qualname: str
    name: str
    cls: str | None
    params: list[str]
    cache_params: list[str]
    has_var_kwargs: bool
    node: cst.FunctionDef = dataclasses.field(repr=False, compare=False)
    uses: list[CacheUse] = dataclasses.field(default_factory=list)
    cache_names: set[str] = dataclasses.field(default_factory=set)  # the cache parameters and their aliases

    def legacy(self) -> list[CacheUse]:
        return [u for u in self.uses if u.kind == "legacy"]

    def passes_to_self_attr(self) -> set[str]:
        """Attributes ``X`` such that a cache variable is an argument of ``self.X(...)``, or of ``self.X[i](...)``
        (a part of a block kept in a ``ModuleList``)."""
        return {u.idiom.split("[", 1)[0] for u in self.uses if u.kind == "pass" and u.idiom.startswith("self.")}


@dataclasses.dataclass
class ClassInfo:
    name: str
    bases: list[str]
    methods: dict[str, FunctionInfo] = dataclasses.field(default_factory=dict)
    submodules: dict[str, str] = dataclasses.field(default_factory=dict)  # self.attr = SomeClass(...)
    # self.attr = A(...) if flash else B(...), or CLASSES[config._attn_implementation](...): every class it can be
    choices: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    module_lists: dict[str, str] = dataclasses.field(default_factory=dict)  # self.attr = nn.ModuleList([C(...)...])
    # a one-layer model's single layer, an attribute handed `cache[0]` (facts/one_layer.py): attr -> its class
    single_layers: dict[str, str] = dataclasses.field(default_factory=dict)
    # locals of __init__ set to a class in its branches (`attention_layer = A` / `= B`): name -> the classes
    class_aliases: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    # names its module binds to a class of a sibling module (a package, cachemigrate.facts.package): `Attn` for
    # `from .attention import SelfAttention as Attn`, `attention.SelfAttention` for `import attention` -> the class
    imported: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ModuleInfo:
    classes: dict[str, ClassInfo]
    functions: dict[str, FunctionInfo]  # every function and method by qualified name
    roles: dict[str, list[str]]  # role -> class names, in file order
    globals: set[str] = dataclasses.field(default_factory=set)  # names bound at module level
    # (function, node, why) for a function outside a model whose cache parameter is not shown to be a past
    unproven: list = dataclasses.field(default_factory=list)
    # heads over a model of the installed transformers (facts/heads.py), where the file has no model of its own
    library_heads: list = dataclasses.field(default_factory=list)
    # the era's cache parameter names (`cache_names` of its era.toml) the file was analysed with
    era_cache_names: tuple = ()

    def role_of(self, class_name: str | None) -> str | None:
        for role, names in self.roles.items():
            if class_name in names:
                return role
        return None

    def legacy_uses(self) -> list[CacheUse]:
        return [u for f in self.functions.values() for u in f.legacy()]

    def on_cache_api(self) -> bool:
        """The file is already migrated: its model code reaches the cache through methods only a ``Cache`` has
        (``update``, ``get_seq_length``...), and reads it as a tuple nowhere but in ``_reorder_cache``, the beam
        reorder that ``generate()`` calls only for tuple caches (kept for backward compatibility)."""
        legacy = self.legacy_uses()
        if any(self.functions[u.function].name != "_reorder_cache" for u in legacy):
            return False
        return any(
            u.kind == "api" and u.idiom.rsplit(".", 1)[-1] in CACHE_ONLY_ATTRIBUTES
            for f in self.functions.values()
            if f.name != "_reorder_cache"
            for u in f.uses
        )
