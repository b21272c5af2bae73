"""``refuse_library_stack``: report a head over a library model's stack of layers (``self.encoder =
BertEncoder(config)``, :mod:`cachemigrate.facts.heads`) where the era's runtime changed that stack's contract; the
rule then refuses the file.

A model's stack of layers is internal to its model: what its ``forward`` takes and gives back changes between
releases without deprecation (transformers 4.57's ``BertEncoder`` writes the cross-attention keys into the cache it
is handed unless that is an ``EncoderDecoderCache``, and gives its cache back with ``use_cache=False``; 5.x's takes
``cache=`` and gives back neither hidden states nor attentions). A head over a library *model* keeps that model's
public contract and migrates; a head over its stack is refused where the stack's contract is not the one the file
was written for, at the line that builds the stack."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..facts.heads import head_of
from ..traverse import findall
from .base import Action, Planner


class RefuseLibraryStack(Action):
    name = "refuse_library_stack"
    REFUSES = True
    PARAMS = {
        "message": (str, True, "what is wrong and what to do; may use {head}, {attribute}, {stack} and {module}"),
    }

    def planner(self) -> Planner:
        return _Planner(self)


class _Planner(Planner):
    CLASS_LEVEL = True

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if self.function_stack or len(self.class_stack) != 1 or node.name.value not in self.ctx.classes:
            return
        head = head_of(self.ctx.info, node.name.value)
        if head is None or not head.stack:
            return
        built = m.Assign(targets=[m.AssignTarget(m.Attribute(value=m.Name("self"), attr=m.Name(head.attribute)))])
        where = next(iter(findall(node, built)), node)
        action: RefuseLibraryStack = self.action
        message = action.param("message").format(
            head=head.name, attribute=head.attribute, stack=head.model, module=head.module
        )
        action.ctx.error(action.rule, None, message, where)
