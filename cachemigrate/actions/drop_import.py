"""``drop_import``: take names out of the file's imports of a transformers module that a newer release removed
(``from ...modeling_utils import PreTrainedModel, SequenceSummary``), when the rule vendors a definition of each
(its ``helpers``): the vendored one is inserted under the same name, so the code that uses it is unchanged. A name
of ``moved`` (name -> the transformers module it lives in now) is dropped too, and imported from its new module
(``from ...modeling_utils import apply_chunking_to_forward`` -> ``from ...pytorch_utils import
apply_chunking_to_forward``) in the file's own import style, where the imports of the applied rules go.

Only top-level ``from`` imports are edited, relative (``from ...x import``) or absolute (``from transformers.x
import``); a name imported under another name (``as``) is left alone. An import that loses every name goes."""

from __future__ import annotations

import libcst as cst

from ..edit.edits import Replace, remove
from ..rules.removed import imported
from .base import Action


class DropImport(Action):
    name = "drop_import"
    PARAMS = {
        "module": (str, True, 'the transformers module, relative to the package, e.g. "modeling_attn_mask_utils"'),
        "names": (list, False, 'the names to drop (default ["*"]: every name the rule vendors or moves)'),
        "moved": (dict, False, 'names -> the transformers module each lives in now, e.g. {Conv1D = "pytorch_utils"}'),
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        moved = rule.params.get("moved", {})
        for name, target in moved.items():
            if not isinstance(target, str) or not target or target.startswith("."):
                raise check.fail(f"params.moved.{name}", 'a transformers module, e.g. "pytorch_utils"', target)
        vendored = {entry.partition(":")[2] for entry in rule.helpers}
        both = sorted(vendored & set(moved))
        if both:
            raise check.fail("params.moved", "names the rule does not also vendor (its `helpers`)", both[0])
        if not rule.helpers and not moved:
            raise check.fail("helpers", "the vendored definitions that replace the dropped names (or params.moved)", [])

    def __init__(self, rule, ctx) -> None:
        super().__init__(rule, ctx)
        self.dropped: list[str] = []

    def _vendored(self) -> dict[str, str]:
        return {entry.partition(":")[2]: entry for entry in self.rule.helpers}

    def plan(self, module: cst.Module) -> list:
        wanted = self.param("names", ["*"])
        vendored = {**self._vendored(), **self.param("moved", {})}
        source = self.param("module")
        for stmt in module.body:
            if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
                continue
            node = stmt.body[0]
            if not isinstance(node, cst.ImportFrom) or isinstance(node.names, cst.ImportStar):
                continue
            if not any(found == source for found, _, n in imported(cst.Module(body=[stmt])) if n is node):
                continue
            drop = [
                alias
                for alias in node.names
                if alias.asname is None
                and isinstance(alias.name, cst.Name)
                and alias.name.value in vendored
                and ("*" in wanted or alias.name.value in wanted)
            ]
            if not drop:
                continue
            self.changes += len(drop)
            self.dropped.extend(alias.name.value for alias in drop if alias.name.value not in self.dropped)
            if len(drop) == len(node.names):
                self.edits.append(Replace(self.rule.id, stmt, remove, (module,)))
                continue
            gone = {alias.name.value for alias in drop}
            self.edits.append(
                Replace(self.rule.id, node, lambda updated, _r, g=gone: _without(updated, g), (module, stmt))
            )
        return self.edits

    def helpers_needed(self) -> list[str]:
        vendored = self._vendored()
        return [vendored[name] for name in self.dropped if name in vendored]

    def imports_needed(self) -> list[str]:
        """The rule's ``imports`` once it vendored a name, and each moved name it dropped, from its new module."""
        moved = self.param("moved", {})
        vendors = any(name not in moved for name in self.dropped)
        return [
            *(self.rule.imports if vendors else ()),
            *(f"{moved[name]}:{name}" for name in self.dropped if name in moved),
        ]


def _without(node: cst.ImportFrom, gone: set[str]) -> cst.ImportFrom:
    kept = [alias for alias in node.names if not (isinstance(alias.name, cst.Name) and alias.name.value in gone)]
    if node.rpar is None:  # no parentheses: no trailing comma
        kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    elif kept[-1] is not node.names[-1]:  # the last name went: its comma (and the line break before `)`) stays
        kept[-1] = kept[-1].with_changes(comma=node.names[-1].comma)
    return node.with_changes(names=kept)
