"""The gradient-checkpointing switch written inside the loop over the blocks (the older spelling of the switch).

Since transformers 4.27 a stack turns caching off once, before its loop over the blocks::

    if self.gradient_checkpointing and self.training:
        if use_cache:
            logger.warning_once("`use_cache=True` is incompatible with gradient checkpointing...")
            use_cache = False

Older releases (BERT and its copies of 4.6.1 to 4.30) wrote the same switch inside the loop, at the top of the
branch that runs the block under checkpointing::

    for i, layer_module in enumerate(self.layer):
        ...
        if getattr(self.config, "gradient_checkpointing", False) and self.training:
            if use_cache:
                logger.warning(...)
                use_cache = False
            def create_custom_forward(module): ...

The two are one idiom: the test reads nothing the loop changes, so it is the same on every pass, and the switch
turns caching off on the first pass, before any block runs. :func:`loop_switch` finds the inner spelling; the
cache set-up, which must follow the last assignment of the flag (:mod:`cachemigrate.actions.insert_statements`),
then takes the switch with it above the loop instead of refusing the file. Only an empty tuple of presents, which
the original returned when the switch fired, becomes None, as in the newer spelling.
"""

from __future__ import annotations

import dataclasses

import libcst as cst
import libcst.matchers as m

from ..traverse import findall, nodes

# what the switch's test may be made of: names and attributes the loop does not bind, literals, `getattr` /
# `hasattr`, `and` / `or` / `not` (and the syntax around them): evaluating it earlier gives the same value
_PURE = (
    cst.Name, cst.Attribute, cst.Dot, cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString,
    cst.BooleanOperation, cst.And, cst.Or, cst.UnaryOperation, cst.Not, cst.Call, cst.Arg, cst.Comma,
    cst.LeftParen, cst.RightParen, cst.BaseParenthesizableWhitespace, cst.TrailingWhitespace, cst.Newline,
    cst.EmptyLine, cst.Comment,
)  # fmt: skip
_PURE_CALLS = ("getattr", "hasattr")


@dataclasses.dataclass(frozen=True)
class LoopSwitch:
    """``if <test>: if <flag>: ...; <flag> = False`` at the top of a branch of the loop over the blocks."""

    loop: cst.For
    branch: cst.If  # `if <test>:` in the loop body, the branch that runs the block under checkpointing
    switch: cst.If  # `if <flag>: ... <flag> = False`, the first statement of that branch
    name: str  # the flag, `use_cache`


def _assignments(node: cst.CSTNode, name: str) -> list:
    return findall(node, m.AssignTarget(m.Name(name)) | m.AugAssign(target=m.Name(name)))


def _bound(node: cst.CSTNode) -> set[str]:
    """Names (and ``self.x`` attributes, as code) that ``node`` binds anywhere in it."""
    found = findall(node, m.AssignTarget() | m.AugAssign() | m.AnnAssign() | m.For() | m.NamedExpr())
    bound = set()
    for binder in found:
        for target in nodes(binder.target):
            if isinstance(target, cst.Name):
                bound.add(target.value)
            elif isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name):
                bound.add(f"{target.value.value}.{target.attr.value}")
    return bound


def _reads_only(expression: cst.CSTNode, changing: set[str]) -> bool:
    """``expression`` reads nothing in ``changing`` (names, ``self.x``) and calls only ``getattr``/``hasattr``."""
    for node in nodes(expression):
        if not isinstance(node, _PURE):
            return False
        if isinstance(node, cst.Call) and not m.matches(node.func, m.Name(m.MatchIfTrue(_PURE_CALLS.__contains__))):
            return False
        if isinstance(node, cst.Name) and node.value in changing:
            return False
        attribute = isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name)
        if attribute and f"{node.value.value}.{node.attr.value}" in changing:
            return False
    return True


def _is_switch(stmt: cst.CSTNode, flag: str, changing: set[str]) -> bool:
    """``if <flag>: <calls>; <flag> = False`` (a warning and the switch; nothing else, no ``else``), whose calls
    read nothing the loop changes."""
    if not m.matches(stmt, m.If(test=m.Name(flag), orelse=None, body=m.IndentedBlock())):
        return False
    turned_off = False
    for line in stmt.body.body:
        if not isinstance(line, cst.SimpleStatementLine):
            return False
        for small in line.body:
            if m.matches(small, m.Assign(targets=[m.AssignTarget(m.Name(flag))], value=m.Name("False"))):
                turned_off = True
            elif m.matches(small, m.Expr(m.Call(func=m.Name() | m.Attribute()))):
                if any(not _reads_only(arg.value, changing) for arg in small.value.args):
                    return False
            else:
                return False
    return turned_off


def loop_switch(loop: cst.CSTNode, flag: str) -> LoopSwitch | None:
    """The switch that turns ``flag`` off inside ``loop`` (a ``for`` over the blocks), if it is the older spelling
    of the switch before the loop: the loop assigns ``flag`` only there; the switch is the first statement of an
    ``if`` of the loop body whose test reads nothing the loop binds (the same on every pass), which keeps other
    statements (the block still runs); no statement of the loop body before that ``if`` reads ``flag``. Else
    None."""
    if not isinstance(loop, cst.For) or not isinstance(loop.body, cst.IndentedBlock):
        return None
    assignments = _assignments(loop, flag)
    if len(assignments) != 1:
        return None
    changing = _bound(loop)
    for index, stmt in enumerate(loop.body.body):
        if not _assignments(stmt, flag):
            if findall(stmt, m.Name(flag)):
                return None  # read before the switch: hoisting it would change what this statement sees
            continue
        if not isinstance(stmt, cst.If) or not isinstance(stmt.body, cst.IndentedBlock):
            return None
        branch = stmt.body.body
        if len(branch) < 2 or not _reads_only(stmt.test, changing):
            return None
        if not _is_switch(branch[0], flag, changing):
            return None
        return LoopSwitch(loop, stmt, branch[0], flag)
    return None


def hands_no_cache_there(stmt: cst.CSTNode, name: str, cache: str) -> bool:
    """``stmt`` is the loop over the blocks, and ``name`` is assigned in it only in one branch of an ``if``/``else``
    of the loop body that runs the block WITHOUT the cache, while only the other branch hands a block the cache (or
    the per-layer past taken from it): BLIP-2's Q-Former turns caching off in the branch that runs the block under
    gradient checkpointing without its past. A cache set up before the loop is then never handed to a block that
    runs twice, nor to one that runs after caching went off, and the set-up may come first. (Bloom's checkpointed
    call hands the block its past; an ``if`` that only turns caching off leaves the block that follows it the cache:
    both stay refused.)"""
    if not isinstance(stmt, cst.For) or not isinstance(stmt.body, cst.IndentedBlock):
        return False
    assignment = m.AssignTarget(m.Name(name)) | m.AugAssign(target=m.Name(name))
    body = stmt.body.body
    holders = [s for s in body if findall(s, assignment)]
    if len(holders) != 1 or not isinstance(holders[0], cst.If) or not isinstance(holders[0].orelse, cst.Else):
        return False
    branch = holders[0]
    derived = {cache}  # and the per-layer past taken from it (`past_key_value = past_key_values[i] if ...`)
    takes = [
        s for s in body if m.matches(s, m.SimpleStatementLine([m.Assign()])) and _reads_name(s.body[0].value, cache)
    ]
    for line in takes:
        derived |= {n.value for t in line.body[0].targets for n in findall(t.target, m.Name())}

    def reads_cache(node) -> bool:
        return any(_reads_name(node, known) for known in derived)

    caching_off, running = branch.body, branch.orelse.body
    if findall(running, assignment) or reads_cache(caching_off) or not reads_cache(running):
        return False
    others = [s for s in body if s is not branch and not any(s is line for line in takes)]
    return not any(reads_cache(s) for s in others)


def _reads_name(node: cst.CSTNode, name: str) -> bool:
    return bool(findall(node, m.Name(name)))
