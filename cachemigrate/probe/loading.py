"""Importing a modeling file so that an original and a migrated copy live side by side as independent modules.

A modeling file is imported one of three ways (see :func:`load_modeling_module`):

- inside a transformers package, for a file copied out of ``transformers/models/<name>/`` (parent-relative imports
  such as ``from ...activations import ACT2FN``);
- inside a fresh private package whose ``__path__`` is the file's folder, for a remote-code folder (a sibling
  ``configuration_*.py`` that the file imports with ``from .configuration_x import XConfig``);
- as a plain top-level module otherwise.

The transformers package of a file is guessed from its name (``modeling_gpt2.py`` -> ``transformers.models.gpt2``).
:func:`packages_for` picks one package for each file of a pair, so that only one of the two needs such a name.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import re
import sys
import types
from pathlib import Path

from .siblings import siblings_of


class ProbeSetupError(Exception):
    """The probe cannot be set up for these files: a problem of the probe's inputs, not a divergence."""


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
    owned: list[str] = []

    if package is not None:
        _require_package(package, path)
        name = f"{package}.{tag}"
    elif _needs_transformers_package(path, source):
        name = f"{guess_transformers_package(path)}.{tag}"
    elif _sibling_configs(path):
        pkg = _make_folder_package(path.parent, tag)
        owned.append(pkg)
        name = f"{pkg}.{path.stem}"
    else:
        name = tag if tag.startswith("_cm_") else f"_cm_{tag}"  # never shadow a real top-level module
    owned.insert(0, name)
    if owned[1:]:  # a remote-code folder: its modules may import each other by their bare names
        with siblings_of(path.parent, owned[1]):
            module = _exec_file(name, path, owned)
    else:
        module = _exec_file(name, path, owned)
    module.__cm_owned__ = tuple(owned)
    return module


def modeling_file(path) -> Path:
    """The modeling file to probe at ``path``: the file itself, or for a folder (a remote-code package) its one
    ``modeling_*.py``, which is imported inside the folder's package with its siblings."""
    path = Path(path)
    if not path.is_dir():
        return path
    found = sorted(path.glob("modeling_*.py"))
    if len(found) != 1:
        which = ", ".join(p.name for p in found) or "none"
        raise ProbeSetupError(f"{path} is a folder: the probe needs its one modeling_*.py (found {which}); name it")
    return found[0]


def unload_module(module: types.ModuleType) -> None:
    """Remove a module loaded by :func:`load_modeling_module` (and its private package) from ``sys.modules``."""
    for name in getattr(module, "__cm_owned__", (module.__name__,)):
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]


def needs_transformers_package(path) -> bool:
    """True when the file can only be imported inside a transformers package (see :func:`load_modeling_module`)."""
    path = Path(path)
    return _needs_transformers_package(path, path.read_text(encoding="utf-8"))


def _needs_transformers_package(path: Path, source: str) -> bool:
    try:
        tree = ast.parse(source, str(path))
    except SyntaxError:
        return False  # importing it will report the syntax error
    levels = [node.level for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    return max(levels, default=0) >= 2 or (any(levels) and not _sibling_configs(path))


def guess_transformers_package(path) -> str:
    """``modeling_gpt2.py`` -> ``transformers.models.gpt2``; trailing ``_suffix`` parts are dropped until one exists.
    Models the library retired live in ``transformers.models.deprecated.<name>`` (their relative imports climb one
    level more): tried after ``transformers.models``, or first for a file that sits in a ``deprecated`` folder."""
    path = Path(path)
    match = re.fullmatch(r"modeling_(\w+)", path.stem)
    if not match:
        raise ValueError(
            f"cannot guess the transformers package for {path.name}: it uses relative imports but is not named "
            "modeling_<name>.py; pass package='transformers.models.<name>'"
        )
    parts = match.group(1).split("_")
    roots = ["transformers.models.", "transformers.models.deprecated."]
    if path.resolve().parent.parent.name == "deprecated":
        roots.reverse()
    tried = []
    for candidate in (root + "_".join(parts[:end]) for root in roots for end in range(len(parts), 0, -1)):
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


def packages_for(paths, package: str | None = None) -> list[str | None]:
    """The package to import each of ``paths`` in (None: no package needed), for files that are compared.

    ``package`` is used for every file that needs one. Otherwise each file's package is guessed from its name, and
    a file whose name says nothing (``orig.py``) takes the package guessed from the other file's name. When a file
    needs a package and no name gives one, one :class:`ProbeSetupError` says so.
    """
    paths = [Path(p) for p in paths]
    needs = [needs_transformers_package(p) for p in paths]
    if package is not None:
        try:
            _require_package(package, paths[0])
        except ModuleNotFoundError as exc:
            raise ProbeSetupError(
                f"package {package!r} is not importable: give an installed one, such as transformers.models.gpt2"
            ) from exc
        return [package if need else None for need in needs]
    guesses: list[str | Exception] = []
    for path in paths:  # a name can vouch for the other file even if it does not need a package itself
        try:
            guesses.append(guess_transformers_package(path))
        except (ValueError, ModuleNotFoundError) as exc:
            guesses.append(exc)
    found = [g for g in guesses if isinstance(g, str)]
    lacking = [(path, g) for path, need, g in zip(paths, needs, guesses) if need and isinstance(g, Exception)]
    if lacking and not found:
        reasons = [
            (
                f"{path.name} is not named modeling_<name>.py"
                if isinstance(g, ValueError)
                else f"{path.name} names no model package of the installed transformers"
            )
            for path, g in lacking
        ]
        raise ProbeSetupError(
            "cannot tell which transformers package to import the files in (their relative imports, from ...x "
            f"import, need one): {'; '.join(reasons)}; pass --package transformers.models.<name>"
        )
    return [(g if isinstance(g, str) else found[0]) if need else None for need, g in zip(needs, guesses)]


def _sibling_configs(path: Path) -> list[Path]:
    return sorted(path.parent.glob("configuration_*.py"))


def _require_package(package: str, path: Path) -> None:
    try:
        found = package in sys.modules or importlib.util.find_spec(package) is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        raise ModuleNotFoundError(f"cannot load {path.name}: package {package!r} is not importable")


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
