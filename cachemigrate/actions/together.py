"""Every rule's planner in ONE walk of the module, dispatched per node type.

Each planner is called exactly as in its own walk (:meth:`Action.plan`: the scoped ones only in the classes and
functions they want), so each action ends with the edits its own walk would give. What the walk does once for all
of them:

- where it is (the path from the module, the class and function stacks, the depth): one :class:`Where` shared by
  every planner, since a planner is only called at the nodes it visits, where its own would be the same;
- the dispatch: a group of planners walking a subtree together keeps, per node type, the few calls that type
  needs (a planner's ``visit_<Node>``, its :meth:`Planner.enter` when it overrides it and :meth:`Planner.enters`
  the type, its scope check at a class, a function or a module-level statement) and the ``leave_<Node>`` hooks,
  so a node costs one dict lookup, not a ``getattr`` and ``isinstance`` checks per planner. The calls keep the
  planners' order;
- trivia (whitespace, comments, punctuation and operators: :data:`TRIVIA`, three nodes in five of a modeling file,
  whose subtrees hold nothing else) is not walked when no planner of the group has a hook for it and none has an
  :meth:`Planner.enter` that looks at it (:attr:`Planner.ENTERS_TRIVIA`): such a planner would be called there
  and do nothing.
"""

from __future__ import annotations

from typing import Callable, Sequence

import libcst as cst

from .. import traverse
from ..traverse import TRIVIA
from .base import Action, Planner
from .where import Where, arrive, depart, node_kind


def _sees_trivia(planner: Planner) -> bool:
    """Whether calling ``planner`` at a trivia node could do anything: a hook for a trivia type, or an
    :meth:`Planner.enter` of its own that does not declare it ignores trivia."""
    if type(planner).enter is not Planner.enter and planner.ENTERS_TRIVIA and any(map(planner.enters, TRIVIA)):
        return True
    return any(hook is not None for kind in TRIVIA for hook in planner.hooks(kind))


# per node type: (its node_kind, the calls at a visit: (index in the group, planner, visit_<Node>, enter, whether
# its scope check applies), the leave_<Node> hooks in order)
_Plan = tuple[tuple[bool, bool, bool, bool], list[tuple[int, Planner, Callable | None, Callable | None, bool]], list]


class _Group:
    """Planners walking a subtree together (in the order they are called), with their dispatch per node type and
    the groups that remain when some of them stop at a node."""

    __slots__ = ("planners", "plans", "subsets", "passes", "seen")

    def __init__(self, planners: tuple[Planner, ...], seen: dict[Planner, bool]) -> None:
        self.planners = planners
        self.plans: dict[type, _Plan] = {}
        self.subsets: dict[tuple[int, ...], _Group] = {}
        self.seen = seen  # planner -> whether it sees trivia (shared by every group of the walk)
        for planner in planners:
            if planner not in seen:
                seen[planner] = _sees_trivia(planner)
        self.passes = frozenset() if any(seen[p] for p in planners) else TRIVIA  # node types not walked

    def plan(self, kind: type) -> _Plan:
        facts = node_kind(kind)
        scoped = facts[0] or facts[1] or facts[2]  # a class, a function or a statement: a scope may end there
        calls, leaves = [], []
        for index, planner in enumerate(self.planners):
            visit, leave = planner.hooks(kind)
            enter = planner.enter if type(planner).enter is not Planner.enter and planner.enters(kind) else None
            checks = scoped and not planner.VISIT_EVERYTHING
            if visit is not None or enter is not None or checks:
                calls.append((index, planner, visit, enter, checks))
            if leave is not None:
                leaves.append(leave)
        found = self.plans[kind] = (facts, calls, leaves)
        return found

    def without(self, stopped: tuple[int, ...]) -> _Group:
        group = self.subsets.get(stopped)
        if group is None:
            gone = set(stopped)
            kept = tuple(p for i, p in enumerate(self.planners) if i not in gone)
            group = self.subsets[stopped] = _Group(kept, self.seen)
        return group


def _walk(node: cst.CSTNode, group: _Group, where: Where) -> None:
    """``walk_many(node, group.planners)`` for planners sharing ``where``."""
    kind = type(node)
    plan = group.plans.get(kind) or group.plan(kind)
    facts, calls, leaves = plan
    moved, name = arrive(where, node, facts)
    stopped: list[int] | None = None
    for index, planner, visit, enter, checks in calls:
        if (
            (checks and planner.skips(moved, name))
            or (visit is not None and visit(node) is False)
            or (enter is not None and not enter(node))
        ):
            if stopped is None:
                stopped = []
            stopped.append(index)
    going = group if stopped is None else group.without(tuple(stopped))
    if going.planners:
        passes = going.passes
        for child in traverse.children(node):  # the module's attribute: bench/bulk.py counts its calls
            if type(child) not in passes:
                _walk(child, going, where)
    for leave in leaves:
        leave(node)
    depart(where, facts)


def plan_together(module: cst.Module, actions: Sequence[Action]) -> None:
    """``action.plan(module)`` for every action (all of them :meth:`Action.plans_by_walking`, and each already
    prepared by :meth:`Action.prepare`, which found something to walk for), in ONE walk of the
    module: each planner is called exactly as in its own walk (the scoped ones only in the classes and functions
    they want), so each action ends with the edits its own :meth:`Action.plan` would give."""
    planners = [action.planner() for action in actions]
    where = Where()
    for planner in planners:
        planner.where = where
    everything = [planner for planner in planners if planner.VISIT_EVERYTHING]
    scoped = [planner for planner in planners if not planner.VISIT_EVERYTHING]
    seen: dict[Planner, bool] = {}
    root = _Group(tuple(everything), seen)
    _, calls, leaves = root.plan(type(module))
    where.stack.append(module)  # the module is no class, function, statement or block: nothing else moves
    stopped = tuple(
        index
        for index, planner, visit, enter, _ in calls
        if (visit is not None and visit(module) is False) or (enter is not None and not enter(module))
    )
    active = root.without(stopped).planners if stopped else root.planners
    groups: dict[tuple[Planner, ...], _Group] = {}
    tops = {id(stmt) for stmt in module.body if isinstance(stmt, (cst.ClassDef, cst.FunctionDef))}
    for child in traverse.children(module):
        visitors = active
        if id(child) in tops:
            visitors += tuple(planner for planner in scoped if planner.wants(child))
        if visitors:
            group = groups.get(visitors)
            if group is None:
                group = groups[visitors] = _Group(visitors, seen)
            if type(child) not in group.passes:
                _walk(child, group, where)
    for leave in leaves:
        leave(module)
    where.stack.pop()
