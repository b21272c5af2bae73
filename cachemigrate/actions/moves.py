"""Moving a statement below an inserted block (the cache set-up), when nothing in between can tell.

Bloom and MPT start their tuple of presents above the gradient-checkpointing ``use_cache = False``; CM016 makes
that statement read the cache, and the cache set-up must wait for the final ``use_cache``. The statement moves
down to just after the set-up when it is one plain assignment (names and literals: evaluating it later cannot raise
or act) and nothing it moves over reads or binds what it touches. Used by :mod:`.insert_statements`.

The other way round, the older spelling of that switch, written inside the loop over the blocks
(:mod:`cachemigrate.facts.caching_switch`), moves up: above the cache set-up, under its own test
(:func:`hoisted_switch`).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..facts.caching_switch import LoopSwitch
from ..views.patterns import code_of
from ..traverse import findall, nodes


def assigns(stmt: cst.CSTNode, name: str) -> bool:
    """``stmt`` assigns ``name`` (``name = ...`` or ``name += ...``) somewhere in it."""
    return bool(findall(stmt, m.AssignTarget(m.Name(name)) | m.AugAssign(target=m.Name(name))))


# what the value of a statement that moves may be made of: names, literals, `... if ... else ...`, `and`/`or`/
# `not`, `is (not)`, tuple and list displays (and the syntax around them)
_PLAIN = (
    cst.Name, cst.Integer, cst.Float, cst.SimpleString, cst.Tuple, cst.List, cst.Element, cst.IfExp,
    cst.BooleanOperation, cst.And, cst.Or, cst.UnaryOperation, cst.Not, cst.Comparison, cst.ComparisonTarget,
    cst.Is, cst.IsNot, cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket, cst.Comma,
    cst.BaseParenthesizableWhitespace, cst.TrailingWhitespace, cst.Newline, cst.EmptyLine, cst.Comment,
)  # fmt: skip


def _plain_assignment(stmt: cst.CSTNode) -> set[str] | None:
    """The targets of ``a = <value>`` (one line, Name targets, a value of names and literals: evaluating it later
    cannot raise or act, and only rebinding a name can change it), else None."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return None
    targets: set[str] = set()
    for small in stmt.body:
        if not isinstance(small, cst.Assign) or not all(isinstance(t.target, cst.Name) for t in small.targets):
            return None
        if not all(isinstance(node, _PLAIN) for node in nodes(small.value)):
            return None
        targets.update(t.target.value for t in small.targets)
    return targets


def move_after_block(edits, insert, reads: list, cache: str, names: list) -> bool:
    """Statements that other rules make read the cache, but that come before the last assignment of ``names``
    (``presents = () if use_cache else None`` above the gradient-checkpointing ``use_cache = False``), move down
    to just after the inserted block, when that is safe: each is one plain assignment that a single splice of
    another rule rewrites; what it moves over (as the other rules leave it) neither reads nor binds its targets,
    nor binds a name it reads, except ``names``: the block waits for their final values, and the moved statement
    then reads them too (with ``use_cache`` turned off no cache is made, so none is handed on or returned, as in
    the original). False, and nothing changed, when any of them cannot move."""
    from ..edit.edits import Resolve

    body, dry = insert.block.body, Resolve({})
    last = max((i for i in range(reads[0], insert.index) if any(assigns(body[i], n) for n in names)), default=None)
    if last is None or reads[-1] > last:
        return False  # nothing to wait for; or a read the block must precede sits after the last assignment
    moving = reads
    splices = []
    for index in moving:
        targets = _plain_assignment(body[index])
        theirs = [e for e in _splices_at(edits, insert, index) if e.count]
        if targets is None or len(theirs) != 1 or theirs[0].count != 1:
            return False
        read = _names_in(body[index]) | {n for stmt in theirs[0].build(dry) for n in _names_in(stmt)}
        for other in range(index + 1, insert.index):
            if other in moving:
                continue
            crossed = [body[other], *_built_at(edits, insert, other, dry)]
            if any(_names_in(node) & targets or _rebinds(node, read - set(names)) for node in crossed):
                return False
        splices.append(theirs[0])
    for splice in splices:
        build, splice.build = splice.build, _nothing
        made = insert.build
        insert.build = lambda resolve, made=made, build=build: [*made(resolve), *build(resolve)]
    return True


def hoisted_switch(found: LoopSwitch) -> cst.If:
    """``if <test>:`` holding the switch alone, to go above the loop (the newer spelling; fresh nodes: the switch
    itself is removed from the loop, :func:`cachemigrate.facts.caching_switch.loop_switch`)."""
    switch = found.switch.deep_clone().with_changes(leading_lines=())
    return cst.If(test=found.branch.test.deep_clone(), body=cst.IndentedBlock([switch]))


def hoist_into(insert, found: LoopSwitch, rule: str):
    """Put the switch first in the block ``insert`` inserts, and return the edit that removes it from the loop."""
    from ..edit.edits import Replace, remove
    from .base import descend

    hoisted, made = hoisted_switch(found), insert.build
    insert.build = lambda resolve: [hoisted, *made(resolve)]
    path = (*insert.path, insert.block, *descend(insert.block, found.switch))
    return Replace(rule, found.switch, remove, path)


def crossed_reads(insert, loop: cst.CSTNode, flag: str, reads: list) -> list[int]:
    """The statements between the block and the loop that read ``flag``, except ``reads`` (those other rules make
    read the cache): a switch moved above them would change what they see."""
    body = insert.block.body
    end = next(i for i, stmt in enumerate(body) if stmt is loop)
    return [i for i in range(insert.index, end) if i not in reads and findall(body[i], m.Name(flag))]


def _splices_at(edits, insert, index: int) -> list:
    """Other edits that splice statement ``index`` of the insert's block (or insert right before it)."""
    return [
        e
        for e in edits
        if e is not insert
        and getattr(e, "block", None) is insert.block
        and e.index <= index < e.index + max(1, e.count)
    ]


def _built_at(edits, insert, index: int, dry) -> list:
    """The code other edits build at statement ``index`` of the insert's block, or inside it, built dry."""
    from ..edit.edits import Replace, Splice

    stmt, nodes = insert.block.body[index], []
    for edit in edits:
        if isinstance(edit, Replace) and (edit.node is stmt or stmt in edit.path):
            built = edit.build(edit.node, dry)
            nodes.extend(built.nodes if isinstance(built, cst.FlattenSentinel) else [built])
        elif isinstance(edit, Splice) and stmt in edit.path:
            nodes.extend(edit.build(dry))
    nodes.extend(n for e in _splices_at(edits, insert, index) for n in e.build(dry))
    return [n for n in nodes if isinstance(n, cst.CSTNode)]


def _nothing(_resolve) -> list:
    return []


def _names_in(node: cst.CSTNode) -> set:
    return {n.value for n in findall(node, m.Name())}


def _bound_in(node: cst.CSTNode) -> set:
    """The names a statement binds anywhere in it (assignments, loops, ``with ... as``, walrus, ``del``, defs,
    imports, ``except ... as``)."""
    found = findall(node, m.AssignTarget() | m.AugAssign() | m.AnnAssign() | m.For() | m.NamedExpr())
    bound = {n for b in found for n in _names_in(b.target)}
    aliases = [w.asname for w in findall(node, m.WithItem())] + [h.name for h in findall(node, m.ExceptHandler())]
    bound |= {n for alias in aliases if alias is not None for n in _names_in(alias)}
    bound |= {n for d in findall(node, m.Del()) for n in _names_in(d.target)}
    bound |= {d.name.value for d in findall(node, m.FunctionDef() | m.ClassDef())}
    imported = findall(node, m.ImportAlias())
    bound |= {(a.asname.name.value if a.asname else code_of(a.name).split(".")[0]) for a in imported}
    return bound


def _rebinds(node: cst.CSTNode, names: set) -> bool:
    """``node`` may bind one of ``names`` (a ``global`` or ``nonlocal`` statement: any)."""
    return bool(_bound_in(node) & names) or bool(findall(node, m.Global() | m.Nonlocal()))
