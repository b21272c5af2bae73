"""Config attributes whose value transformers' own config class fixes on the era's runtime (CM915).

5.x's T5-family config classes (``T5Config``, ``MT5Config``, ``UMT5Config``, ``LongT5Config``...) always set
``tie_word_embeddings = True``, whatever a checkpoint was saved with; 4.x's kept the saved value, and T5 copies read it
to decide whether to scale the decoder's output (T5 v1.1 and mT5 checkpoints are saved with ``False``). A file
migrated for such a runtime whose config class is transformers' own, one of those, and that reads the attribute
(``config.X`` / ``self.config.X``), gets a note at the read: it now reads the forced value, not the checkpoint's, and
the model computes something else there. Which classes, and where each keeps the value it was given, is data:
``[changed.forced_config]`` in an era's ``era.toml`` (``bench/forced_config.py`` measures it on a runtime).

A config class the file defines, or imports from a module beside it (the user's own copy), keeps 4.x's behaviour and
gets no note. Only :mod:`ast`, after the engine, as the other notes on a migrated file's config
(:mod:`.companions`).
"""

from __future__ import annotations

import ast
from pathlib import Path

from ..diagnostics import FORCED_CONFIG, Diagnostic
from .companions import config_class_of, config_reads, releases


def _library_import(tree: ast.Module, name: str, folder: Path) -> tuple[str, int] | None:
    """(the class's own name, the import's line) when ``name`` comes from transformers: an absolute import, or a
    relative one whose module is not beside the file (the file sits in transformers' package)."""
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        alias = next((a for a in node.names if (a.asname or a.name) == name), None)
        if alias is None:
            continue
        module = node.module or ""
        if node.level == 0:
            return (alias.name, node.lineno) if module.split(".")[0] == "transformers" else None
        sibling = folder.joinpath(*([".."] * (node.level - 1)), *module.split(".")).with_suffix(".py")
        return None if sibling.is_file() else (alias.name, node.lineno)
    return None


def forced_config_notes(path: str, code: str, era: str, forced: dict[str, dict], runtime: str) -> list[Diagnostic]:
    """CM915 notes of a migrated file (``code``, at ``path``): each read of an attribute of ``forced`` whose config
    class is transformers' own and forces it on the era's runtime."""
    if not forced:
        return []
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    name = config_class_of(tree)
    if name is None or any(isinstance(n, ast.ClassDef) and n.name == name for n in tree.body):
        return []
    imported = _library_import(tree, name, Path(path).parent)
    if imported is None:
        return []
    cls, line = imported
    wanted = {attribute: spec for attribute, spec in forced.items() if cls in spec.get("classes", ())}
    notes = []
    for attribute, node in sorted(config_reads(tree, wanted).items(), key=lambda i: (i[1].lineno, i[1].col_offset)):
        spec = wanted[attribute]
        kept = spec.get("kept_in", {}).get(cls)
        if kept:
            fix = (f"`{cls}` keeps the value it was given in `{kept}`: read "
                   f'`getattr(config, "{kept}", config.{attribute})` here (the same value on 4.x)')  # fmt: skip
        else:
            fix = f"`{cls}` keeps no copy of it: give the model a config class of its own (4.x's, copied)"
        notes.append(
            Diagnostic(
                path,
                node.lineno,
                node.col_offset + 1,
                FORCED_CONFIG,
                f"note: the file reads `config.{attribute}` of `{cls}`, transformers' own config class (imported at "
                f"line {line}); on transformers {releases(runtime)} (era {era} runs there) that class always sets it "
                f"to `{spec.get('value')}`, whatever a checkpoint was saved with, so the model computes here as if it "
                f"were `{spec.get('value')}`. {fix}",
            )
        )
    return notes
