"""The normalised views of a file's functions, built on demand, once per function, and shared by every rule."""

from __future__ import annotations

import libcst as cst

from ..facts.analysis import ModuleInfo
from ..views.normalize import FunctionViews, ViewStatement
from ..facts.helper_layout import helper_concatenation
from ..views.ranks import RankOracle, RankScope


class FileViews:
    """Views of every function of a file that rules look at. The rank of a layer's cache tensors (what the
    attention concatenates onto them) is read off the attention first, so that ``past_key_values[0][0].size(2)``
    in the model reads as the same axis as ``dim=-2`` there."""

    def __init__(self, info: ModuleInfo) -> None:
        self.info = info
        self.oracle = RankOracle(
            {q: f.node for q, f in info.functions.items()},
            {name: [b for b in cls.bases if b in info.classes] for name, cls in info.classes.items()},
        )
        self._functions: dict[str, FunctionViews] = {}
        self.cache_rank: int | None = None
        self.class_ranks: dict[str, int | None] = {}  # classes whose code reads the cache in another layout
        ranks = set()
        for name in info.roles["attention"]:
            fn = info.classes[name].methods.get("forward")
            if fn is not None:
                ranks.update(self.of(fn.qualname).expressions.concatenated)
                if fn.cache_params and not self.of(fn.qualname).expressions.concatenated:
                    ranks.update(_helper_rank(fn))  # the past concatenated in a projection helper
        self._functions.clear()
        self.cache_rank = ranks.pop() if len(ranks) == 1 else None

    def set_rank(self, classes, rank: int | None) -> None:
        """The functions of ``classes`` read a layer's cache tensors with ``rank`` axes (the heads, when the base
        model converts the cache to another layout for its attention)."""
        for name in classes:
            self.class_ranks[name] = rank
        for qualname in [q for q in self._functions if self.info.functions[q].cls in set(classes)]:
            del self._functions[qualname]

    def of(self, qualname: str | None) -> FunctionViews | None:
        if qualname is None or qualname not in self.info.functions:
            return None
        if qualname not in self._functions:
            fn = self.info.functions[qualname]
            caches = fn.cache_names or set(fn.cache_params)
            scope = RankScope(lookup=self.oracle.lookup(fn.cls))
            rank = self.class_ranks.get(fn.cls, self.cache_rank)
            self._functions[qualname] = FunctionViews(fn.node, caches, scope, rank)
        return self._functions[qualname]

    def view(self, node: cst.CSTNode, qualname: str | None) -> cst.CSTNode:
        views = self.of(qualname)
        return views.view(node) if views is not None else node

    def block(self, block: cst.CSTNode, qualname: str | None) -> list[ViewStatement]:
        views = self.of(qualname)
        if views is None:
            return [ViewStatement(stmt, i, 1) for i, stmt in enumerate(getattr(block, "body", ()))]
        return views.block(block)


def _helper_rank(fn) -> set[int]:
    """The rank of what a projection helper nested in the attention concatenates onto the past it is handed."""
    found = helper_concatenation(fn.node, fn.cache_params[0])
    if found is None:
        return set()
    rank = found[4].rank(found[2])
    return {rank} if rank is not None else set()
