"""What the file imports from the installed transformers, read off its import statements: one reading shared by the
facts that ask "is this name a class of the library?" (:mod:`.heads`, :mod:`.patches`). A name counts only when the
file imports it from ``transformers`` (or a module of it), never by its spelling alone; a relative import is the
model's own package, never the library, except where the caller asks for ``tree=True``: a file of transformers' own
tree (a release's ``models/<name>/modeling_<name>.py``, and copies of it) reaches the library with relative imports
of two or three dots (``from ..bert.modeling_bert import BertEncoder`` is ``transformers.models.bert.modeling_bert``,
``from ...modeling_utils import PreTrainedModel`` is ``transformers.modeling_utils``), as
:func:`cachemigrate.rules.removed.imported` reads them; one dot is the model's own folder, and two dots count only
for another model's ``<name>.modeling_<name>``, three only for a ``modeling_*`` module or a model's
``models.<name>.modeling_<name>`` (``from ...models.auto.modeling_auto import AutoModelForCausalLM``).

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


# where a relative import of a file in transformers' tree (``transformers/models/<name>/``) lands, per dot count
TREE = {2: f"{LIBRARY}.models", 3: LIBRARY}


def library_names(module: cst.Module, tree: bool = False) -> dict[str, str]:
    """Local name -> the dotted library path it stands for (a module or a class), for every import of the file from
    transformers at its top level (in top-level ``try``/``if`` blocks too); with ``tree``, the relative imports of
    two or three dots too (see the module's docstring)."""
    names: dict[str, str] = {}
    for stmt in module.body:
        for node in findall(stmt, m.ImportFrom() | m.Import()):
            if isinstance(node, cst.ImportFrom):
                source = dotted(node.module) if node.module is not None and not node.relative else None
                if (
                    tree
                    and node.relative
                    and node.module is not None
                    and _in_tree(len(node.relative), dotted(node.module))
                ):
                    source = f"{TREE[len(node.relative)]}.{dotted(node.module)}"
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


def _in_tree(dots: int, module: str) -> bool:
    """``from <dots><module> import`` names a module of transformers' tree as a file of ``models/<name>/`` sees it:
    another model's modeling module (``..bert.modeling_bert``) or a top-level ``modeling_*`` module
    (``...modeling_utils``); anything else (``..layers``: a user's own package above the file) is not the library."""
    parts = module.split(".")
    if dots == 2:
        return len(parts) == 2 and parts[1].startswith("modeling_") and parts[1] == f"modeling_{parts[0]}"
    if dots == 3 and len(parts) == 3:  # `...models.auto.modeling_auto`: a model's modeling module, from models/<name>/
        return parts[0] == "models" and parts[2] == f"modeling_{parts[1]}"
    return dots == 3 and len(parts) == 1 and parts[0].startswith("modeling_")


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
