"""Which files are migrated together: a package unit is the modules of one folder that hand a cache to each other.

A remote-code folder or a layer library keeps its attention, its blocks and its model in sibling modules that
import each other (``from .attention import SelfAttention``, or ``from attention import ...`` as a folder on the path
does). Such modules are one model: migrating one alone would leave a model that hands a Cache to an attention that
indexes a tuple. :func:`package_units` reads the sibling imports of the modules in the folders of the files a run
takes from their text, and which of them take a cache (Python's own parser, no libcst); a file is migrated with its
folder's modules when the sibling imports connect it to them and two modules whose functions take a cache import
one another (the configuration module, imported by all, takes none). The engine then analyses the unit as one
model (:mod:`cachemigrate.package_engine`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from pathlib import Path

# `from .attention import X`, `from attention import X`, `from . import attention, blocks`, `import attention`
_FROM = re.compile(r"^[ \t]*from[ \t]+(\.?)([A-Za-z_]\w*)?[ \t]+import[ \t]+\(?([^\n#]*)", re.MULTILINE)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([^\n#]*)", re.MULTILINE)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def sibling_imports(text: str, siblings: set[str]) -> set[str]:
    """The stems of ``siblings`` the module's text imports (relatively, or by their bare names)."""
    found: set[str] = set()
    for dot, module, names in _FROM.findall(text):
        if module and module in siblings:
            found.add(module)
        elif dot and not module:  # from . import attention, blocks
            found.update(
                n.split()[0] for n in names.replace(")", "").split(",") if n.split() and n.split()[0] in siblings
            )
    for names in _IMPORT.findall(text):
        found.update(n.split()[0] for n in names.split(",") if n.split() and n.split()[0] in siblings)
    return found


def _takes_cache(text: str, names: frozenset[str]) -> bool:
    """A function of the module takes a parameter named like a cache (a configuration that lists
    ``"past_key_values"`` among the keys to ignore takes none)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return any(
        arg.arg in names
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)
    )


class _Folder:
    """The modules of one folder, which name a cache, and their sibling imports."""

    def __init__(self, folder: Path, cache: re.Pattern, names: frozenset[str]) -> None:
        self.paths = {p.stem: p for p in sorted(folder.glob("*.py")) if p.is_file() and p.stem != "__init__"}
        texts = {stem: _read(path) for stem, path in self.paths.items()}
        self.caching = {stem for stem, text in texts.items() if cache.search(text) and _takes_cache(text, names)}
        stems = set(self.paths)
        self.edges: dict[str, set[str]] = {stem: set() for stem in stems}
        for stem, text in texts.items():
            for target in sibling_imports(text, stems - {stem}):
                self.edges[stem].add(target)
                self.edges[target].add(stem)

    def unit(self, stem: str) -> list[Path]:
        """The modules connected to ``stem`` by sibling imports, when two of them that name a cache import one
        another; else none (the file is migrated alone)."""
        seen, todo = {stem}, [stem]
        while todo:
            for other in self.edges[todo.pop()] - seen:
                seen.add(other)
                todo.append(other)
        linked = any(self.edges[a] & self.caching for a in seen & self.caching)
        return [self.paths[s] for s in sorted(seen)] if linked else []


def package_units(files: Sequence[Path], cache_names: Sequence[str]) -> tuple[list[list[Path]], list[Path]]:
    """(the package units, each a list of module paths in a stable order; the files migrated alone), for the
    files a run takes. A unit can hold modules the run did not name: the siblings a named file spans."""
    cache = re.compile(r"\b(?:" + "|".join(map(re.escape, cache_names)) + r")\b")
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
            folder = folders[resolved.parent] = _Folder(resolved.parent, cache, frozenset(cache_names))
        unit = folder.unit(resolved.stem) if resolved.stem in folder.paths else []
        if not unit:
            alone.append(path)
            continue
        units.append([Path(path).parent / p.name for p in unit])  # in the spelling of the path named
        placed.update(p.resolve() for p in unit)
    return units, alone
