"""``retie_weights``: a class of the file whose ``__init__`` hands a sub-module another module's weight as it is
built (``self.encoder = Stack(config, self.shared)``, where ``Stack.__init__`` does ``self.embed_tokens.weight =
embed_tokens.weight``) gets a ``_tie_weights`` that assigns it again (CM462).

``from_pretrained`` of 4.51.3 and 4.57.6 builds the model on the meta device and loads each name of the checkpoint
on its own, giving the module it names a new Parameter: a weight shared by assignment is shared no more, and a name
the checkpoint does not hold (the one ``save_pretrained`` dropped as a duplicate) stays uninitialised. It then calls
``tie_weights``, which calls every module's ``_tie_weights``: the assignment made there holds again, as it does in
4.35's own models (their ``_tie_weights`` re-ties the stacks' embeddings). A module handed whole
(``self.embed_tokens = embed_tokens``) is one object and needs nothing; a class that has a ``_tie_weights`` of its
own, or that hands the weight only under a test, is left alone (:mod:`.tie_list` then does not name what it hands).
5.x never calls ``_tie_weights``; it ties what ``_tied_weights_keys`` maps (CM420)."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from .base import Action, Planner
from .tie_sources import TieSources

COMMENT = (
    "# 4.x's from_pretrained loads each weight on its own, then calls `_tie_weights`: give these modules again the\n"
    "# weights `__init__` gave them (added by cachemigrate)\n"
)


def weight_ties(sources: TieSources, name: str) -> list:
    """The ties class ``name``'s ``__init__`` makes by handing a weight (not a module) to a sub-module, always."""
    return [t for t in sources.built_ties(name) if t.by_weight and t.how == "built"]


class RetieWeights(Action):
    name = "retie_weights"
    PARAMS = {}

    def prepare(self, module: cst.Module) -> bool:
        self.sources = TieSources(module)
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
        ties = weight_ties(sources, name)
        if not ties or sources.method(name, "_tie_weights") is not None:
            return
        body = list(node.body.body)
        init = next((i for i, s in enumerate(body) if m.matches(s, m.FunctionDef(m.Name("__init__")))), None)
        if init is None:
            return
        self.action.changes += 1
        lines = "".join(f"    self.{t.target} = self.{t.source}\n" for t in dict.fromkeys(ties))
        code = "def _tie_weights(self):\n" + "".join(f"    {c}\n" for c in COMMENT.splitlines()) + lines
        method = cst.parse_statement(code).with_changes(leading_lines=[cst.EmptyLine(indent=False)])
        self.insert(node.body, init + 1, [method])
