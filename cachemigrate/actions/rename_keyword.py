"""``rename_keyword``: a keyword argument that a transformers function took in older releases, renamed where the
file calls that function (``add_code_sample_docstrings(tokenizer_class=...)`` -> ``processor_class=...``): the
runtime's function no longer takes the old keyword, so the file would not import there.

Only calls of a name the file imports from transformers (``from ...file_utils import f``, ``from
transformers.utils import f``; not under another name) are edited, wherever they are (decorators too), and only
when the call passes the old keyword and not the new one already. The value and everything else of the call stay as
written."""

from __future__ import annotations

import libcst as cst

from ..rules.removed import imported
from .base import Action, Planner


class RenameKeyword(Action):
    name = "rename_keyword"
    PARAMS = {
        "function": (str, True, 'the transformers function, as imported, e.g. "add_code_sample_docstrings"'),
        "modules": (list, True, 'the transformers modules it is imported from, e.g. ["file_utils", "utils"]'),
        "old": (str, True, "the keyword the older releases took"),
        "new": (str, True, "the keyword the era's runtime takes"),
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        for key in ("function", "old", "new"):
            if not rule.params[key].isidentifier():
                raise check.fail(f"params.{key}", "a Python name", rule.params[key])
        if not rule.params["modules"] or not all(isinstance(name, str) and name for name in rule.params["modules"]):
            raise check.fail("params.modules", "transformers modules, e.g. \"file_utils\"", rule.params["modules"])

    def prepare(self, module: cst.Module) -> bool:
        function, modules = self.param("function"), set(self.param("modules"))
        return any(
            source in modules and name == function and not _aliased(node, function)
            for source, name, node in imported(module)
        )

    def planner(self) -> Planner:
        return _Planner(self)


def _aliased(node: cst.CSTNode, name: str) -> bool:
    """The import binds ``name`` under another name (``import f as g``)."""
    names = node.names if isinstance(node, cst.ImportFrom) and not isinstance(node.names, cst.ImportStar) else []
    return any(isinstance(a.name, cst.Name) and a.name.value == name and a.asname is not None for a in names)


class _Planner(Planner):
    VISIT_EVERYTHING = True

    def visit_Call(self, node: cst.Call) -> None:
        action: RenameKeyword = self.action
        if not (isinstance(node.func, cst.Name) and node.func.value == action.param("function")):
            return
        keywords = {arg.keyword.value: arg for arg in node.args if arg.keyword is not None}
        old, new = action.param("old"), action.param("new")
        if old not in keywords or new in keywords:
            return
        action.changes += 1
        self.replace(keywords[old].keyword, lambda updated, _r: updated.with_changes(value=new))
