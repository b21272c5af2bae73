"""What the file imports from the installed transformers, read off its import statements: one reading shared by the
facts that ask "is this name a class of the library?" (:mod:`.heads`, :mod:`.patches`). A name counts only when the
file imports it from ``transformers`` (or a module of it), never by its spelling alone; a relative import is the
model's own package, never the library.

``from transformers.models.gpt2.modeling_gpt2 import GPT2Attention as A`` binds ``A`` to
``transformers.models.gpt2.modeling_gpt2.GPT2Attention``; ``import transformers.models.gpt2.modeling_gpt2 as mg`` binds
``mg``; a plain ``import transformers...`` binds ``transformers``. :func:`resolve` then reads a dotted name as written
in the file (``A``, ``mg.GPT2Attention``, ``transformers.GPT2Model``) as (library module, class name).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..traverse import findall
from ..views.names import dotted

LIBRARY = "transformers"


def library_names(module: cst.Module) -> dict[str, str]:
    """Local name -> the dotted library path it stands for (a module or a class), for every import of the file from
    transformers at its top level (in top-level ``try``/``if`` blocks too)."""
    names: dict[str, str] = {}
    for stmt in module.body:
        for node in findall(stmt, m.ImportFrom() | m.Import()):
            if isinstance(node, cst.ImportFrom):
                source = dotted(node.module) if node.module is not None and not node.relative else None
                if not source or source.split(".")[0] != LIBRARY or isinstance(node.names, cst.ImportStar):
                    continue
                for alias in node.names:
                    local = alias.asname.name.value if alias.asname else alias.name.value
                    names[local] = f"{source}.{dotted(alias.name)}"
                continue
            for alias in node.names:
                full = dotted(alias.name)
                if not full or full.split(".")[0] != LIBRARY:
                    continue
                if alias.asname:
                    names[alias.asname.name.value] = full
                else:
                    names[LIBRARY] = LIBRARY
    return names


def resolve(target: str, names: dict[str, str]) -> tuple[str | None, str]:
    """(the dotted library module, the class name) of ``target``, a dotted name as the file writes it; the module
    is None where its first name is not imported from transformers (the class name is then the last part as
    written)."""
    first, _, rest = target.partition(".")
    if first not in names:
        return None, target.rsplit(".", 1)[-1]
    full = names[first] + (f".{rest}" if rest else "")
    library, _, cls = full.rpartition(".")
    return library, cls
