"""Importing a remote-code folder as a package whose modules import each other absolutely.

Remote code run with its folder on ``sys.path`` imports its siblings by their bare names (``from attention import
SelfAttention``). The probe loads an original and a migrated copy of one folder side by side, so neither may take
the bare name for good: while a folder's module runs, :func:`siblings_of` resolves a bare name that is a module of
the folder to that module inside the folder's private package (``<package>.attention``), and afterwards removes
the bare names it bound. A name the folder has no module for is imported as usual.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import sys
from pathlib import Path


class _Loader(importlib.abc.Loader):
    """Hands out a module already imported under the package's name."""

    def __init__(self, module) -> None:
        self.module = module

    def create_module(self, spec):
        return self.module

    def exec_module(self, module) -> None:
        return None


class _Siblings(importlib.abc.MetaPathFinder):
    def __init__(self, folder: Path, package: str) -> None:
        self.folder, self.package = folder, package
        self.bound: list[str] = []

    def find_spec(self, fullname, path, target=None):
        if "." in fullname or not (self.folder / f"{fullname}.py").is_file():
            return None
        module = importlib.import_module(f"{self.package}.{fullname}")
        self.bound.append(fullname)
        return importlib.machinery.ModuleSpec(fullname, _Loader(module))


@contextlib.contextmanager
def siblings_of(folder: Path, package: str):
    """While the block runs, ``import x`` / ``from x import y`` of a module ``x.py`` of ``folder`` gives the module
    ``<package>.x`` (``package``: the folder's private package); the bare names are unbound afterwards."""
    finder = _Siblings(Path(folder), package)
    sys.meta_path.insert(0, finder)
    try:
        yield finder
    finally:
        sys.meta_path.remove(finder)
        for name in finder.bound:
            module = sys.modules.get(name)
            if module is not None and getattr(module, "__name__", "").startswith(package + "."):
                del sys.modules[name]
