"""Config attributes a migrated file reads that its era's runtime no longer sets by default.

transformers 4.x's ``PretrainedConfig.__init__`` gave every config ``pad_token_id = None``, ``is_decoder = False``,
``tie_word_embeddings = True`` and some forty more; 5.x's sets none of them (they moved to the generation config or
went), so ``config.pad_token_id`` raises AttributeError there unless the model's own config class sets it. Which
attributes, and the 4.x default of each, is data: ``config_defaults`` in ``[removed]`` of an era's ``era.toml``.

For a migrated file, each ``config.X`` / ``self.config.X`` it reads of those is checked against its config class
(``config_class = XConfig``), found in the file itself or in the companion module it imports it from
(``from .configuration_x import XConfig`` or ``from configuration_x import XConfig``, beside the file). If that
class sets ``X`` (``self.X = ...`` in ``__init__``, ``X=...`` handed to ``super().__init__``, or a class attribute)
all is well; if it does not, a note says what to add. A config class that cannot be found or read, or that extends
another config than ``PretrainedConfig``, is not guessed about. A note does not stop the migration: the original
file reads the attribute too, and fails on that runtime the same way.

Only :mod:`ast`: this runs in the command line's process, after the engine (never cached: the companion file may
change without the modeling file).
"""

from __future__ import annotations

import ast
from pathlib import Path

from ..diagnostics import CONFIG_DEFAULT, Diagnostic
BASES = {"PretrainedConfig", "PreTrainedConfig"}


def _reads(tree: ast.AST, names: dict[str, str]) -> dict[str, ast.Attribute]:
    """The first read of each ``config.X`` / ``self.config.X`` with ``X`` in ``names``."""
    found: dict[str, ast.Attribute] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr in names):
            continue
        owner = node.value
        is_config = (isinstance(owner, ast.Name) and owner.id == "config") or (
            isinstance(owner, ast.Attribute) and owner.attr == "config" and isinstance(owner.value, ast.Name)
        )
        if is_config:
            seen = found.get(node.attr)
            if seen is None or (node.lineno, node.col_offset) < (seen.lineno, seen.col_offset):
                found[node.attr] = node
    return found


def _config_class(tree: ast.Module) -> str | None:
    """The name a class of the file assigns to ``config_class``."""
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name):
                if any(isinstance(t, ast.Name) and t.id == "config_class" for t in stmt.targets):
                    return stmt.value.id
    return None


def _companion(tree: ast.Module, name: str, folder: Path) -> Path | None:
    """The sibling module ``name`` is imported from (one dot, or an absolute name of a file beside this one)."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level <= 1:
            if any((alias.asname or alias.name) == name for alias in node.names):
                candidate = folder / (node.module.replace(".", "/") + ".py")
                return candidate if candidate.is_file() else None
    return None


def _sets(tree: ast.Module, name: str) -> set[str] | None:
    """What class ``name`` of ``tree`` sets; None if it is not there or extends a config of another kind."""
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if cls is None:
        return None
    bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in cls.bases}
    if not bases & BASES:
        return None
    sets: set[str] = set()
    for stmt in cls.body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            sets.update(t.id for t in targets if isinstance(t, ast.Name))
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                sets.add(node.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__":
            if isinstance(node.func.value, ast.Call) and getattr(node.func.value.func, "id", "") == "super":
                sets.update(k.arg for k in node.keywords if k.arg)
    return sets


def _releases(runtime: str) -> str:
    return f"{runtime[2:]} and later" if runtime.startswith(">=") and "," not in runtime else runtime


def missing_defaults(path: str, code: str, defaults: dict[str, str], runtime: str, era: str) -> list[Diagnostic]:
    """CM911 notes for ``code`` (the migrated file at ``path``): each attribute of ``defaults`` (name -> 4.x default)
    it reads from its config that its config class does not set."""
    if not defaults:
        return []
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    reads = _reads(tree, defaults)
    name = _config_class(tree) if reads else None
    if name is None:
        return []
    where, config_tree = "the file", tree
    if not any(isinstance(n, ast.ClassDef) and n.name == name for n in tree.body):
        companion = _companion(tree, name, Path(path).parent)
        if companion is None:
            return []
        try:
            config_tree = ast.parse(companion.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, SyntaxError):
            return []
        where = companion.name
    sets = _sets(config_tree, name)
    if sets is None:
        return []
    notes = []
    for attribute, node in sorted(reads.items(), key=lambda item: (item[1].lineno, item[1].col_offset)):
        if attribute in sets:
            continue
        default = defaults[attribute]
        notes.append(
            Diagnostic(
                path,
                node.lineno,
                node.col_offset + 1,
                CONFIG_DEFAULT,
                f"note: the file reads `config.{attribute}`, which transformers {_releases(runtime)} (era {era}) no "
                f"longer sets by default (4.x's PretrainedConfig set it to `{default}`), and `{name}` ({where}) does not set it, "
                f"so this read raises AttributeError there. Add `{attribute}={default}` to `{name}.__init__` and "
                f"pass it on: `super().__init__({attribute}={attribute}, **kwargs)`",
            )
        )
    return notes
