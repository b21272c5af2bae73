"""Edits: what a rule asks to change, always named by ORIGINAL nodes of the parsed file.

An action never rewrites the tree itself. It plans edits on the nodes it matched: replace a node, remove it, or
insert statements into a block. The engine applies the edits of every rule in one pass
(:mod:`cachemigrate.edit.apply`) and proves with :mod:`cachemigrate.proof.audit` that the file changed nowhere else. Each
edit carries the id of the rule that made it: that is the rule's *claim* on the original file.

Nodes are keys only while the original tree is alive (the plan holds it), so identity is stable: nothing is ever
keyed on a node built during a pass.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterator, Sequence, Union

import libcst as cst

Built = Union[cst.CSTNode, cst.FlattenSentinel, cst.RemovalSentinel]


class Resolve:
    """Maps original nodes to what they became once the edits inside them were applied.

    A build function gets one of these, so that a replacement which re-uses captured original code (a ``{hole}``
    of a template, a ``{body}``) picks up the edits other rules made inside that code."""

    def __init__(self, results: dict) -> None:
        self._results = results

    def node(self, original: cst.CSTNode) -> cst.CSTNode | None:
        """The updated node; ``None`` if an edit removed it. A statement that became several gives the first."""
        result = self._results.get(original, original)
        if isinstance(result, cst.RemovalSentinel):
            return None
        if isinstance(result, cst.FlattenSentinel):
            return result.nodes[0] if result.nodes else None
        return result

    def statements(self, originals: Sequence[cst.CSTNode]) -> list[cst.BaseStatement]:
        """Updated statements for a run of original ones: removed ones dropped, split ones spliced."""
        out: list = []
        for original in originals:
            result = self._results.get(original, original)
            if isinstance(result, cst.FlattenSentinel):
                out.extend(result.nodes)
            elif not isinstance(result, cst.RemovalSentinel):
                out.append(result)
        return out

    def value(self, value: object) -> object:
        """A captured value: a node, or a tuple of statements (a block body)."""
        if isinstance(value, tuple):
            return tuple(self.statements(value))
        if isinstance(value, cst.CSTNode):
            resolved = self.node(value)
            return value if resolved is None else resolved
        return value

    def values(self, values: dict) -> dict:
        return {name: self.value(value) for name, value in values.items()}


@dataclasses.dataclass(eq=False)
class Replace:
    """Replace ``node`` (an original node) by what ``build(updated_node, resolve)`` returns: a node, a
    ``FlattenSentinel`` of statements, or ``RemoveFromParent()``. ``captures`` are original nodes the build
    function re-uses (they are resolved to their edited form)."""

    rule: str
    node: cst.CSTNode
    build: Callable[[cst.CSTNode, Resolve], Built]
    path: tuple[cst.CSTNode, ...]  # ancestors of ``node``, from the module down (exclusive)
    captures: tuple[cst.CSTNode, ...] = ()
    reformat: bool = False  # black the enclosing simple statement if it no longer fits the line length
    claim: str = "node"  # "node": the node with the whitespace it owns; "header": a compound statement up to its body


@dataclasses.dataclass(eq=False)
class Splice:
    """Replace the ``count`` original statements of ``block`` (an original IndentedBlock or the Module) from
    number ``index`` on by the statements ``build(resolve)`` returns; ``count == 0`` inserts before statement
    ``index`` (``len(body)``: at the end). The run's statements are resolved with every edit inside them
    applied, so ``build`` can re-use them (``resolve.statements(run)``)."""

    rule: str
    block: cst.CSTNode
    index: int
    count: int
    build: Callable[[Resolve], Sequence[cst.BaseStatement]]
    path: tuple[cst.CSTNode, ...]  # ancestors of ``block``, from the module down (exclusive)
    captures: tuple[cst.CSTNode, ...] = ()

    @property
    def statements(self) -> tuple[cst.CSTNode, ...]:
        return tuple(self.block.body[self.index : self.index + self.count])


@dataclasses.dataclass(eq=False)
class Rename:
    """A parameter of ``function`` (an original FunctionDef) renamed ``old`` -> ``new``. The rule renames the
    original uses with Replace edits of their own; this tells the applier that code other rules build inside
    the function reads the variable under its new name too."""

    rule: str
    node: cst.FunctionDef
    old: str
    new: str
    path: tuple[cst.CSTNode, ...]


Edit = Union[Replace, Splice, Rename]


def remove(_updated: cst.CSTNode, _resolve: Resolve) -> cst.RemovalSentinel:
    return cst.RemoveFromParent()


class Plan:
    """The edits of all rules for one file, in rule order."""

    def __init__(self) -> None:
        self.edits: list[Edit] = []

    def __iter__(self) -> Iterator[Edit]:
        return iter(self.edits)

    def __len__(self) -> int:
        return len(self.edits)

    def extend(self, edits: Sequence[Edit]) -> None:
        self.edits.extend(edits)

    def rules(self) -> list[str]:
        return list(dict.fromkeys(edit.rule for edit in self.edits))

    def only(self, rules: set[str]) -> "Plan":
        plan = Plan()
        plan.extend([e for e in self.edits if e.rule in rules])
        return plan

    def targets(self) -> set[cst.CSTNode]:
        return {e.block if isinstance(e, Splice) else e.node for e in self.edits}
