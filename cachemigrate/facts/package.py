"""A package: the sibling modules of one folder (a remote-code folder, a layer library) analysed as one model.

The attention, the blocks and the model that stacks them can live in sibling modules that import each other,
relatively (``from .attention import SelfAttention``) or, as remote-code folders run with their folder on the path
do, absolutely (``from attention import SelfAttention as Attn``, ``import blocks`` then ``blocks.Block(...)``).
Every module is parsed once; the class names each module binds by such an import are resolved to the class its
sibling defines, so the role finder (:mod:`cachemigrate.facts.roles`) sees the classes of all the modules as one
file's: the cache flows from the model in one module to the block in another and the attention in a third.

What a package cannot be analysed for is said at the import that causes it: modules that import each other in a
cycle (the tool analyses each module after those it imports), two modules that define one class name, and a class
that hands the cache to a module built from a class imported from outside the package (the code that reads the
cache is not in the folder).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import libcst as cst

from ..views.patterns import code_of
from .analysis import ModuleInfo, analyze, module_globals
from .consumers import consumers
from .roles import assign_roles


@dataclasses.dataclass
class Member:
    """One module of the package."""

    path: str
    code: str
    module: cst.Module
    # local name -> the class a sibling defines (`from .attention import SelfAttention as Attn`: Attn -> SelfAttention)
    names: dict[str, str] = dataclasses.field(default_factory=dict)
    # local name -> a sibling module imported whole (`import blocks`, `from . import blocks`)
    modules: dict[str, str] = dataclasses.field(default_factory=dict)
    # (sibling stem, the import statement) for every import of a sibling
    imports: list[tuple[str, cst.CSTNode]] = dataclasses.field(default_factory=list)
    # local name -> (the module it comes from, the import statement): names imported from outside the package
    outside: dict[str, tuple[str, cst.CSTNode]] = dataclasses.field(default_factory=dict)

    @property
    def stem(self) -> str:
        return Path(self.path).stem

    @property
    def name(self) -> str:
        return Path(self.path).name


def _alias(node: cst.ImportAlias) -> tuple[str, str]:
    """(the imported name, the name bound) of one alias."""
    name = code_of(node.name)
    return name, code_of(node.asname.name) if node.asname else name.split(".")[0]


def _top_imports(module: cst.Module):
    """The import statements at the module's top level (and in its top-level ``try``/``if`` blocks)."""
    for stmt in module.body:
        blocks = [stmt]
        if isinstance(stmt, (cst.If, cst.Try)):
            blocks = list(stmt.body.body) + [s for h in getattr(stmt, "handlers", ()) for s in h.body.body]
        for block in blocks:
            if isinstance(block, cst.SimpleStatementLine):
                for small in block.body:
                    if isinstance(small, (cst.Import, cst.ImportFrom)):
                        yield small


def read_imports(member: Member, siblings: set[str]) -> None:
    """Fill ``member``'s names, modules, imports and outside from its import statements; ``siblings``: the stems of
    the folder's modules."""
    for node in _top_imports(member.module):
        if isinstance(node, cst.Import):
            for alias in node.names:
                name, bound = _alias(alias)
                if name in siblings and name != member.stem:
                    member.modules[bound] = name
                    member.imports.append((name, node))
            continue
        level = len(node.relative)
        source = code_of(node.module) if node.module is not None else ""
        aliases = [] if isinstance(node.names, cst.ImportStar) else list(node.names)
        if level in (0, 1) and source in siblings and source != member.stem:  # from .attention / from attention
            member.imports.append((source, node))
            for alias in aliases:
                name, bound = _alias(alias)
                member.names[bound] = name
        elif level == 1 and not source:  # from . import attention
            for alias in aliases:
                name, bound = _alias(alias)
                if name in siblings:
                    member.modules[bound] = name
                    member.imports.append((name, node))
        else:
            for alias in aliases:
                name, bound = _alias(alias)
                member.outside[bound] = ("." * level + source, node)


def import_cycle(members: list[Member]) -> list[tuple[Member, cst.CSTNode]] | None:
    """A cycle of sibling imports, as (module, its import of the next one), or None: the modules in import order
    otherwise (see :func:`in_import_order`)."""
    by_stem = {member.stem: member for member in members}
    state: dict[str, int] = {}
    stack: list[tuple[Member, cst.CSTNode | None]] = []

    def visit(member: Member) -> list | None:
        state[member.stem] = 1
        for target, node in member.imports:
            if target not in by_stem:
                continue
            stack.append((member, node))
            if state.get(target) == 1:
                start = next(i for i, (m, _) in enumerate(stack) if m.stem == target)
                return stack[start:]
            if target not in state:
                found = visit(by_stem[target])
                if found:
                    return found
            stack.pop()
        state[member.stem] = 2
        return None

    for member in members:
        if member.stem not in state:
            found = visit(member)
            if found:
                return found
    return None


def in_import_order(members: list[Member]) -> list[Member]:
    """The members, each after the siblings it imports (the package has no cycle: :func:`import_cycle`)."""
    by_stem = {member.stem: member for member in members}
    ordered: list[Member] = []

    def place(member: Member) -> None:
        if member in ordered:
            return
        for target, _ in member.imports:
            if target in by_stem:
                place(by_stem[target])
        ordered.append(member)

    for member in members:
        place(member)
    return ordered


def _resolve(name: str, member: Member, package: set[str] = frozenset()) -> str:
    """The class a name of ``member``'s code stands for: a sibling's class imported under another name
    (``Attn``), or reached through a sibling module (``attention.SelfAttention``). A name imported from outside the
    package that a module of the package also defines stands for the outside one (``mylib.SelfAttention``)."""
    if name in member.names:
        return member.names[name]
    if name in member.outside and name in package:
        return f"{member.outside[name][0]}.{name}"
    head, _, rest = name.partition(".")
    if rest and head in member.modules:
        return rest
    return name


def _resolve_class(cls, member: Member, defined: dict[str, set[str]]) -> None:
    """The class names of ``cls`` (its bases, what its ``__init__`` builds) as the classes they stand for;
    ``defined``: the class names each sibling module defines."""
    cls.imported = {alias: name for alias, name in member.names.items() if alias != name}
    for alias, stem in member.modules.items():
        cls.imported.update({f"{alias}.{name}": name for name in defined.get(stem, ())})
    package = set().union(*defined.values())
    cls.bases = [_resolve(b, member, package) for b in cls.bases]
    cls.submodules = {a: _resolve(c, member, package) for a, c in cls.submodules.items()}
    cls.choices = {a: [_resolve(c, member, package) for c in cs] for a, cs in cls.choices.items()}
    cls.module_lists = {a: _resolve(c, member, package) for a, c in cls.module_lists.items()}
    cls.class_aliases = {a: [_resolve(c, member, package) for c in cs] for a, cs in cls.class_aliases.items()}


def owners(members: list[Member]) -> dict[str, Member]:
    """Top-level class and function name -> the member that defines it."""
    found: dict[str, Member] = {}
    for member in members:
        for stmt in member.module.body:
            if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)):
                found.setdefault(stmt.name.value, member)
    return found


def defined_twice(members: list[Member], cache_names) -> tuple[str, Member, cst.CSTNode] | None:
    """(name, the member that defined it first, the second definition) for the first class, or module-level function
    that takes a cache, that a second module defines again (the analysis knows each name once)."""
    seen: dict[str, Member] = {}
    for member in members:
        for stmt in member.module.body:
            if isinstance(stmt, cst.FunctionDef) and not _takes(stmt, cache_names):
                continue
            if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)):
                if stmt.name.value in seen and seen[stmt.name.value] is not member:
                    return stmt.name.value, seen[stmt.name.value], stmt
                seen[stmt.name.value] = member
    return None


def _takes(function: cst.FunctionDef, cache_names) -> bool:
    params = function.params
    return any(p.name.value in cache_names for p in (*params.posonly_params, *params.params, *params.kwonly_params))


def combined(members: list[Member]) -> cst.Module:
    """One module of the members' statements (their own nodes), in their order: what the package is analysed as."""
    return cst.Module(body=[stmt for member in members for stmt in member.module.body])


def analyze_package(members: list[Member], module: cst.Module, cache_names) -> ModuleInfo:
    """The facts of the package as of one file (``module``: :func:`combined`): every module's classes and
    functions (each keeps its own nodes), the class names resolved across the sibling imports, and the roles found
    over them all."""
    info = analyze(module, cache_names)
    owner = owners(members)
    defined: dict[str, set[str]] = {}
    for name, member in owner.items():
        defined.setdefault(member.stem, set()).add(name)
    for cls in info.classes.values():
        if cls.name in owner:
            _resolve_class(cls, owner[cls.name], defined)
    roles = assign_roles(info.classes)
    roles["consumer"] = []
    roles["patch"] = []  # a package's modules are migrated as one model, not as patches of library classes
    unproven: list = []
    if not roles["attention"] and not roles["base_model"]:
        roles["consumer"], unproven = consumers(info.functions)
    info.roles, info.unproven = roles, unproven
    info.globals = set().union(*(module_globals(member.module) for member in members))
    return info


def member_info(info: ModuleInfo, member: Member) -> ModuleInfo:
    """The package's facts seen from one member: every class and the roles of all, but only the member's own
    functions (what is audited and located in its file)."""
    own = {stmt.name.value for stmt in member.module.body if isinstance(stmt, (cst.ClassDef, cst.FunctionDef))}
    functions = {q: f for q, f in info.functions.items() if (f.cls or f.qualname) in own}
    return ModuleInfo(
        info.classes, functions, info.roles, module_globals(member.module), [], era_cache_names=info.era_cache_names
    )


def handed_outside(info: ModuleInfo, members: list[Member]) -> tuple[Member, str, str, cst.CSTNode] | None:
    """(member, what hands the cache on, the class it builds, that class's import) for a class that hands it to
    ``self.<attr>(...)`` built from a class the package imports from outside: the code that reads the cache is not
    in the package."""
    owner = owners(members)
    for cls in info.classes.values():
        forward = cls.methods.get("forward")
        member = owner.get(cls.name)
        if forward is None or not forward.cache_params or member is None:
            continue
        handed = {idiom.split(".", 1)[1] for idiom in forward.passes_to_self_attr()}
        for attr in sorted(handed):
            for built in cls.choices.get(attr, [cls.submodules.get(attr)]):
                name = _imported_from_outside(built or "", member)
                if name and built not in info.classes:
                    return member, f"{cls.name} hands its cache to `self.{attr}`", name, member.outside[name][1]
    return None


def _imported_from_outside(built: str, member: Member) -> str | None:
    """The name ``member`` imports from outside the package that ``built`` (as resolved) is or starts with."""
    for name, (source, _) in member.outside.items():
        if built in (name, f"{source}.{name}") or built.startswith(name + "."):
            return name
    return None
