"""Which files are migrated together: a package unit is the modules of one folder that hand a cache to each other.

A remote-code folder or a layer library keeps its attention, its blocks and its model in sibling modules that
import each other (``from .attention import SelfAttention``, or ``from attention import ...`` as a folder on the path
does). Such modules are one model: migrating one alone would leave a model that hands a Cache to an attention that
indexes a tuple. :func:`package_units` reads the modules of the folders of the files a run takes with Python's own
parser (no libcst): module A is linked to its sibling B when A takes a cache (a function of A has a parameter named
like one), imports a class of B whose methods take a cache, and builds a module of it (``SelfAttention(config)``,
``blocks.DecoderBlock(config)``). A file is migrated with the modules linked to it, directly or not; a subclass of a
sibling's class (a model that derives from another model's head) or a module that takes no cache links nothing,
nor does a module the default selection leaves out (TensorFlow and Flax models). The engine then analyses the unit
as one model (:mod:`cachemigrate.package_engine`).
"""

from __future__ import annotations

import ast
import dataclasses
import fnmatch
import re
from collections.abc import Sequence
from pathlib import Path

from .walk import DEFAULT_EXCLUDE


@dataclasses.dataclass
class _Module:
    """What a sibling module of a package defines, imports and builds, for grouping modules into units."""

    caching: set[str]  # the classes whose methods take a cache
    imported: dict[str, tuple[str, str]]  # local name -> (sibling stem, class name); `stem.Class` for `import stem`
    built: set[str]  # the names called: `SelfAttention(...)`, `blocks.DecoderBlock(...)`


def _takes_cache(node: ast.AST, names: frozenset[str]) -> bool:
    args = node.args
    return any(arg.arg in names for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs))


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


# `from .attention import X`, `from attention import X`, `from . import attention, blocks`, `import attention`
_FROM = re.compile(r"^[ \t]*from[ \t]+(\.?)([A-Za-z_]\w*)?[ \t]+import[ \t]+\(?([^\n#]*)", re.MULTILINE)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([^\n#]*)", re.MULTILINE)


def _named_siblings(text: str, stems: set[str]) -> set[str]:
    """The sibling stems the text may import (a first look, from the text: what to parse)."""
    found = {module for _, module, _ in _FROM.findall(text) if module in stems}
    for dot, module, names in _FROM.findall(text):
        if dot and not module:
            found.update(n.split()[0] for n in names.replace(")", "").split(",") if n.split())
    for names in _IMPORT.findall(text):
        found.update(n.split()[0] for n in names.split(",") if n.split())
    return found & stems


def _read(text: str, stems: set[str], names: frozenset[str]) -> _Module | None:
    """What a module says of its cache, its sibling imports and what it builds; None when no function of it takes
    a cache."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if not any(_takes_cache(f, names) for f in functions):
        return None
    module = _Module(set(), {}, set())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and any(
            isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and _takes_cache(f, names) for f in node.body
        ):
            module.caching.add(node.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level in (0, 1):
            for alias in node.names:
                bound = alias.asname or alias.name
                if node.module in stems:  # from .attention import SelfAttention / from attention import ...
                    module.imported[bound] = (node.module, alias.name)
                elif node.level == 1 and not node.module and alias.name in stems:  # from . import blocks
                    module.imported[bound + ".*"] = (alias.name, "*")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in stems:
                    module.imported[(alias.asname or alias.name) + ".*"] = (alias.name, "*")
        elif isinstance(node, ast.Call):
            called = _dotted(node.func)
            if called:
                module.built.add(called)
    return module


def _links(module: _Module, modules: dict[str, _Module]) -> set[str]:
    """The siblings of whose cache-taking classes ``module`` builds a module."""
    found = set()
    for called in module.built:
        head, _, rest = called.partition(".")
        stem, name = module.imported.get(called, (None, None))
        if stem is None and rest and f"{head}.*" in module.imported:
            stem, name = module.imported[f"{head}.*"][0], rest
        if stem in modules and name in modules[stem].caching:
            found.add(stem)
    return found


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


class _Folder:
    """The modules of one folder that take a cache, and which of them are linked."""

    def __init__(self, folder: Path, cache: re.Pattern, names: frozenset[str]) -> None:
        paths = {
            p.stem: p
            for p in sorted(folder.glob("*.py"))
            if p.is_file() and p.stem != "__init__" and not any(fnmatch.fnmatch(p.name, x) for x in DEFAULT_EXCLUDE)
        }
        self.paths = paths
        texts = {stem: _text(path) for stem, path in paths.items()}
        caching = {stem for stem, text in texts.items() if cache.search(text)}
        imports = {stem: _named_siblings(texts[stem], set(paths) - {stem}) for stem in caching}
        # parse only what may link: a module that names a cache and is imported by one that names a cache, then
        # the modules that import one of those that has a class taking a cache
        modules = {}
        for stem in caching & set().union(*imports.values()):
            module = _read(texts[stem], set(paths) - {stem}, names)
            if module is not None and module.caching:
                modules[stem] = module
        for stem in caching - set(modules):
            if imports[stem] & set(modules):
                module = _read(texts[stem], set(paths) - {stem}, names)
                if module is not None:
                    modules[stem] = module
        self.edges: dict[str, set[str]] = {stem: set() for stem in modules}
        for stem, module in modules.items():
            for target in _links(module, modules) - {stem}:
                self.edges[stem].add(target)
                self.edges[target].add(stem)

    def unit(self, stem: str) -> list[Path]:
        """The modules linked to ``stem``, directly or not, with it; empty when none is."""
        if not self.edges.get(stem):
            return []
        seen, todo = {stem}, [stem]
        while todo:
            for other in self.edges[todo.pop()] - seen:
                seen.add(other)
                todo.append(other)
        return [self.paths[s] for s in sorted(seen)]


def package_units(files: Sequence[Path], cache_names: Sequence[str]) -> tuple[list[list[Path]], list[Path]]:
    """(the package units, each a list of module paths in a stable order; the files migrated alone), for the
    files a run takes. A unit can hold modules the run did not name: the siblings a named file spans."""
    names = frozenset(cache_names)
    cache = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(names))) + r")\b")
    folders: dict[Path, _Folder] = {}
    units: list[list[Path]] = []
    alone: list[Path] = []
    placed: set[Path] = set()
    for path in files:
        resolved = Path(path).resolve()
        if resolved in placed:
            continue
        folder = folders.get(resolved.parent)
        if folder is None:
            folder = folders[resolved.parent] = _Folder(resolved.parent, cache, names)
        unit = folder.unit(resolved.stem)
        if not unit:
            alone.append(path)
            continue
        units.append([Path(path).parent / p.name for p in unit])  # in the spelling of the path named
        placed.update(p.resolve() for p in unit)
    return units, alone
