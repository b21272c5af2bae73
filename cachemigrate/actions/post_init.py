"""``call_post_init``: ``self.init_weights()`` at the end of a model's ``__init__`` (transformers up to 4.17 wrote
it so) becomes ``self.post_init()``.

transformers 5 sets what ``from_pretrained`` and ``tie_weights`` read (``all_tied_weights_keys``, the
``_keep_in_fp32_modules`` sets...) in ``PreTrainedModel.post_init`` only, and its ``init_weights`` ties through
``all_tied_weights_keys``: a model that never calls ``post_init`` fails to build there (``AttributeError: ... no
attribute 'all_tied_weights_keys'``, measured on 5.25.0). Every release since 4.18 has ``post_init``, and on 4.x it
calls ``init_weights`` itself, so the rewrite is the same model there.

Only a class that derives, directly or through classes of the file, from a ``*PreTrainedModel`` is rewritten, and
only when its ``__init__`` does not call ``self.post_init()`` already and no class of the file on its way to the
library defines ``init_weights`` or ``post_init`` (an own ``init_weights`` is the file's own contract)."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..traverse import findall
from .base import Action, Planner

_INIT_WEIGHTS = m.SimpleStatementLine(
    body=[m.Expr(m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name("init_weights")), args=[]))]
)
_POST_INIT = m.Call(func=m.Attribute(value=m.Name("self"), attr=m.Name("post_init")))


class CallPostInit(Action):
    name = "call_post_init"
    PARAMS = {}

    def planner(self) -> Planner:
        return _Planner(self)

    def qualifies(self, name: str) -> bool:
        """``name`` is a PreTrainedModel of the file none of whose classes defines ``init_weights``/``post_init``."""
        classes = self.ctx.info.classes
        chain, pending, library = [], [name], False
        while pending:
            current = pending.pop()
            if current in chain:
                continue
            chain.append(current)
            for base in classes[current].bases:
                short = base.rsplit(".", 1)[-1]
                if base in classes:
                    pending.append(base)
                elif short.endswith("PreTrainedModel"):
                    library = True
        return library and not any(
            method in classes[c].methods for c in chain for method in ("init_weights", "post_init")
        )


class _Planner(Planner):
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        action: CallPostInit = self.action
        if len(self.function_stack) != 1 or not self.in_function_scope() or node.name.value != "__init__":
            return
        cls = self.current_class
        if cls is None or cls not in self.ctx.info.classes or not action.qualifies(cls):
            return
        if findall(node, _POST_INIT):
            return
        for stmt in findall(node, _INIT_WEIGHTS):
            action.changes += 1
            self.replace(
                stmt.body[0].value,
                lambda updated, _r: updated.with_changes(func=updated.func.with_changes(attr=cst.Name("post_init"))),
            )

