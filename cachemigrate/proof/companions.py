"""Config attributes a migrated file reads that its era's runtime no longer sets by default.

transformers 4.x's ``PretrainedConfig.__init__`` gave every config ``pad_token_id = None``, ``is_decoder = False``,
``tie_word_embeddings = True`` and some forty more; 5.x's sets none of them (they moved to the generation config or
went), so ``config.pad_token_id`` raises AttributeError there unless the model's own config class sets it. Which
attributes, and the 4.x default of each, is data: ``config_defaults`` in ``[removed]`` of an era's ``era.toml``.

For a migrated file, each ``config.X`` / ``self.config.X`` it reads of those is checked against its config class
(``config_class = XConfig``), found in the file itself or in the companion module it imports it from
(``from .configuration_x import XConfig`` or ``from configuration_x import XConfig``, beside the file). If that
class sets ``X`` (``self.X = ...`` in ``__init__``, ``X=...`` handed to ``super().__init__``, or a class attribute)
all is well; if it does not, a note says what to add. A ``_tied_weights_keys`` mapping (CM420 writes it) counts as
a read of ``tie_word_embeddings``: 5.x ties it only when that is true, and no longer sets it by default. A config class that cannot be found or read, or that extends
another config than ``PretrainedConfig``, is not guessed about. A note does not stop the migration: the original
file reads the attribute too, and fails on that runtime the same way.

The companion module is read for a second reason: if it imports a transformers module or name the era's runtime
removed (``[removed] imports``: ``transformers.onnx`` in 5.x, which ``configuration_*.py`` files import for their
``OnnxConfig``), the package will not import there, however well the modeling file was migrated: a note (CM912)
names the import. The companion is the user's file, not one named to the tool, so it is not rewritten.

Only :mod:`ast`: this runs in the command line's process, after the engine (never cached: the companion file may
change without the modeling file).
"""

from __future__ import annotations

import ast
from pathlib import Path

from ..diagnostics import COMPANION_REMOVED, CONFIG_DEFAULT, Diagnostic
from ..rules.eras import removed_entry

BASES = {"PretrainedConfig", "PreTrainedConfig"}


def config_reads(tree: ast.AST, names: dict[str, str]) -> dict[str, ast.Attribute]:
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


def _tied_mapping(tree: ast.Module) -> ast.Assign | None:
    """The first class-level ``_tied_weights_keys = {...}``: the runtime reads ``config.tie_word_embeddings`` for
    it (5.x ties the mapping only when it is true)."""
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Dict) and stmt.value.keys:
                if any(isinstance(t, ast.Name) and t.id == "_tied_weights_keys" for t in stmt.targets):
                    return stmt
    return None


def config_class_of(tree: ast.Module) -> str | None:
    """The name a class of the file assigns to ``config_class``."""
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for stmt in cls.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name):
                if any(isinstance(t, ast.Name) and t.id == "config_class" for t in stmt.targets):
                    return stmt.value.id
    return None


def _companion(tree: ast.Module, name: str, folder: Path) -> tuple[Path, int] | None:
    """The sibling module ``name`` is imported from (one dot, or an absolute name of a file beside this one), and
    the line of that import."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level <= 1:
            if any((alias.asname or alias.name) == name for alias in node.names):
                candidate = folder / (node.module.replace(".", "/") + ".py")
                return (candidate, node.lineno) if candidate.is_file() else None
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


def releases(runtime: str) -> str:
    """A runtime range as prose: ``>=5.0`` is "5.0 and later"."""
    return f"{runtime[2:]} and later" if runtime.startswith(">=") and "," not in runtime else runtime


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None


def companion_notes(path: str, code: str, era: str, defaults: dict[str, str], runtime: str,
                    removed_imports: tuple[str, ...]) -> list[Diagnostic]:  # fmt: skip
    """The notes of a migrated file (``code``, at ``path``) about its config: CM911 and CM912. ``runtime`` is the
    range of the releases that dropped the defaults and the imports (era 5's)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    name = config_class_of(tree)
    if name is None:
        return []
    if any(isinstance(n, ast.ClassDef) and n.name == name for n in tree.body):
        return missing_defaults(path, tree, name, None, tree, defaults, runtime, era)
    found = _companion(tree, name, Path(path).parent)
    config_tree = _parse(found[0]) if found is not None else None
    if config_tree is None:
        return []
    companion, line = found
    notes = missing_defaults(path, tree, name, companion, config_tree, defaults, runtime, era)
    notes += removed_in_companion(path, line, companion, config_tree, removed_imports, runtime, era)
    return sorted(notes)


def _transformers_imports(tree: ast.Module) -> list[tuple[str, str, ast.AST]]:
    """(module relative to transformers, name or "", node) of each import of transformers (absolute, or relative
    from inside the package: two dots or more)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0:
                if not module.startswith("transformers."):
                    continue
                module = module[len("transformers.") :]
            elif node.level < 2:
                continue
            found.extend((module, alias.name, node) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.extend(
                (alias.name[len("transformers.") :], "", node)
                for alias in node.names
                if alias.name.startswith("transformers.")
            )
    return found


def removed_in_companion(path: str, line: int, companion: Path, tree: ast.Module, removed: tuple[str, ...],
                         runtime: str, era: str) -> list[Diagnostic]:  # fmt: skip
    """CM912: the first import of the companion module that the era's runtime removed (``module`` or
    ``module:Name`` entries, relative to transformers), said at the modeling file's import of the config (``line``)."""
    for module, name, node in _transformers_imports(tree):
        if removed_entry(module, name, removed) is not None:
            what = f"`transformers.{module}`" + (f" (`{name}`)" if name else "")
            return [
                Diagnostic(
                    path,
                    line,
                    1,
                    COMPANION_REMOVED,
                    f"note: {companion.name}:{node.lineno}, the module this file takes its config from, imports "
                    f"{what}, which transformers {releases(runtime)} no longer has (era {era} runs there), so "
                    "the package will not import there. Remove what uses it from that module (an ONNX export "
                    "config is not needed to run the model), or guard the import with `try: ... except "
                    "ImportError:`",
                )
            ]
    return []


def missing_defaults(path: str, tree: ast.Module, name: str, companion: Path | None, config_tree: ast.Module,
                     defaults: dict[str, str], runtime: str, era: str) -> list[Diagnostic]:  # fmt: skip
    """CM911 notes: each attribute of ``defaults`` (name -> 4.x default) the file reads from its config that its
    config class ``name`` does not set."""
    reads = config_reads(tree, defaults) if defaults else {}
    tied = _tied_mapping(tree) if "tie_word_embeddings" in defaults else None
    sets = _sets(config_tree, name) if reads or tied else None
    if sets is None:
        return []
    where = companion.name if companion is not None else "the file"
    notes = []
    if tied is not None and "tie_word_embeddings" not in sets:
        default = defaults["tie_word_embeddings"]
        notes.append(
            Diagnostic(
                path,
                tied.lineno,
                tied.col_offset + 1,
                CONFIG_DEFAULT,
                f"note: transformers {releases(runtime)} (era {era} runs there) ties the parameters of "
                "`_tied_weights_keys` only when `config.tie_word_embeddings` is true, which it no longer sets by "
                f"default (4.x's PretrainedConfig set it to `{default}`), and `{name}` ({where}) does not set it, so "
                f"the model's weights would not be tied there. Add `tie_word_embeddings={default}` to "
                f"`{name}.__init__` and pass it on: `super().__init__(tie_word_embeddings=tie_word_embeddings, "
                "**kwargs)`",
            )
        )
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
                f"note: the file reads `config.{attribute}`, which transformers {releases(runtime)} (era {era} "
                f"runs there) no longer sets by default (4.x's PretrainedConfig set it to `{default}`), and `{name}` "
                f"({where}) does not set it, "
                f"so this read raises AttributeError there. Add `{attribute}={default}` to `{name}.__init__` and "
                f"pass it on: `super().__init__({attribute}={attribute}, **kwargs)`",
            )
        )
    return notes
