"""``tied_weights_list``: a PreTrainedModel of the file without ``_tied_weights_keys`` (files written before 4.31)
whose parameters are shared by construction or tied by 4.x's ``tie_weights`` gets the list of them (CM461).

``save_pretrained`` of 4.51.3 and 4.57.6 (safetensors, the default) groups the state dict's tensors by storage and,
in each group, drops the names that the ``_tied_weights_keys`` of the model and its sub-modules match (patterns
searched in the full names), keeping one; a group left with two names it cannot drop raises ``RuntimeError: The
weights trying to be saved contained shared tensors``. 4.x reads the list nowhere else: it ties through
``tie_weights`` whatever the list says. So every parameter the file's code ties (:mod:`.tie_sources`: the output
embeddings, a module handed to a sub-module as it is built, under a test of the config or not, the ties of
``_tie_weights``, and those of the sub-models, with their prefix) is listed; an entry that is not shared in a given
config matches no group and does nothing. A weight handed by assignment (``self.embed_tokens.weight =
embed_tokens.weight``) is named only where CM462's ``_tie_weights`` assigns it again after ``from_pretrained`` (which
loads each name on its own): a name ``save_pretrained`` drops must come back. Transformers 5 reads the attribute as a mapping: era 5 has CM420
instead."""

from __future__ import annotations

import textwrap

import libcst as cst
import libcst.matchers as m

from .base import Action, Planner
from .tie_sources import TieSources

COMMENT = "the parameters shared with another: 4.x's save_pretrained keeps one of each (added by cachemigrate)"


class TiedWeightsList(Action):
    name = "tied_weights_list"
    PARAMS = {}

    def prepare(self, module: cst.Module) -> bool:
        self.sources = TieSources(module)
        # weights handed by assignment that no `_tie_weights` assigns again after loading (CM462 adds one where it
        # can): naming them would let save_pretrained drop a weight that from_pretrained then leaves uninitialised
        self.unretied = set()
        for cls in self.sources.classes:
            own = self.sources.method(cls, "_tie_weights") is not None
            for tie in self.sources.built_ties(cls):
                if tie.by_weight and (own or tie.how != "built"):
                    self.unretied.add(tie.target)
        return True

    def planner(self) -> Planner:
        return _Planner(self)


class _Planner(Planner):
    CLASS_LEVEL = True  # class bodies are edited: visited without a function in scope

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        name = node.name.value
        if self.function_stack or len(self.class_stack) != 1 or name not in self.ctx.classes:
            return
        sources: TieSources = self.action.sources
        if not sources.is_pretrained(name):
            return
        if any(sources.class_assigns(cls, "_tied_weights_keys") for cls in sources.mro(name)):
            return
        kept = self.action.unretied
        targets = list(
            dict.fromkeys(
                t.target
                for t in sources.ties(name)
                if t.how not in ("raises", "untied") and t.target and not (t.by_weight and _ends_with_any(t.target, kept))
            )
        )
        if not targets:
            return
        self.action.changes += 1
        self._add_list(node, targets)

    def _add_list(self, node: cst.ClassDef, targets: list[str]) -> None:
        indent = node.body.indent if isinstance(node.body, cst.IndentedBlock) and node.body.indent else "    "
        entries = [f'"{t}"' for t in targets]
        text = "[" + ", ".join(entries) + "]"
        if len(indent) + len("_tied_weights_keys = ") + len(text) > self.ctx.line_length:
            text = "[\n" + "".join(f"{indent}{entry},\n" for entry in entries) + "]"
        statement = cst.parse_statement(f"_tied_weights_keys = {text}\n")
        width = max(self.ctx.line_length - len(indent) - 2, 40)
        lines = [cst.EmptyLine(comment=cst.Comment(f"# {line}")) for line in textwrap.wrap(COMMENT, width)]
        body = list(node.body.body)
        first = 1 if body and m.matches(body[0], m.SimpleStatementLine([m.Expr(m.SimpleString())])) else 0
        if first:  # after the docstring, a blank line
            lines.insert(0, cst.EmptyLine(indent=False))
        statement = statement.with_changes(leading_lines=lines)
        following = body[first] if first < len(body) else None
        if isinstance(following, (cst.FunctionDef, cst.ClassDef)) and not following.leading_lines:
            self.replace(
                following, lambda updated, _r: updated.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
            )
        self.insert(node.body, first, [statement])


def _ends_with_any(target: str, suffixes: set[str]) -> bool:
    return any(target == s or target.endswith("." + s) for s in suffixes)
