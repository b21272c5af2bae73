"""Normalised views of a function's code, for matching only: rules are written once, in one spelling.

Rules match the VIEW of a statement; what they rewrite is the original, and code outside an edit keeps its own
spelling byte for byte. A view is built from the original nodes with ``with_changes`` so that everything the
normalisation did not touch is the original node itself: a captured ``{key}`` is the user's code.

What the view makes equal (``C`` is a cache variable of the function, found by the analysis):

* ``torch.cat([a, b], 2)``, ``torch.cat((a, b), dim=2)``, ``torch.concat(..., axis=2)``: a tuple, ``dim=`` by
  keyword, and a positive ``dim`` written negative when the rank of the operands is known
  (:mod:`cachemigrate.views.ranks`; the cache's own tensors have the rank of the layout); the same for ``stack``;
* ``x.size(k)``, ``x.size()[k]``, ``x.shape[k]``: ``x.shape[k]``, negative when the rank of ``x`` is known;
* ``x != None``, ``x == None``, ``None is x``: ``x is not None``, ``x is None``;
* ``if C:``, ``C and ...``, ``... if C else ...``, ``not C``: ``C is not None`` / ``C is None``, and a local
  flag assigned once from such a test (``has_layer_past = layer_past is not None``) stands for the test;
* ``a, b = C``, ``(a, b) = C``, ``a, b = C[0], C[1]``, and ``a = C[0]`` followed by ``b = C[1]``: folded into
  the statements that follow, where ``a`` and ``b`` read ``C[0]`` and ``C[1]`` (when nothing else reads them);
  a lone ``a = C[i]`` read by the next statement only is folded into it (``prev_key = C[0]`` then
  ``key = torch.cat((prev_key, key), dim=2)``: ``key = torch.cat((C[0], key), dim=2)``);
  an element read through a swap of two axes (``a, b = C[0].transpose(-2, -1), C[1]``), or a lone one through a
  view that merges the two leading axes (``prev_key = C[0].view(batch * heads, -1, head_dim)``), is folded as
  written.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import libcst as cst
import libcst.matchers as m

from .expressions import Expressions, int_literal, merged_product, rebuild
from .ranks import RankScope
from ..traverse import findall


@dataclasses.dataclass(frozen=True)
class ViewStatement:
    """One statement of a block's view: ``node``, standing for ``count`` original statements from ``start``."""

    node: cst.BaseStatement
    start: int
    count: int


def _unpacked(stmt: cst.BaseStatement, caches: set[str]) -> tuple[list[str], str] | None:
    """``a, b = C`` (or ``(a, b) = C``, ``a, b = C[0], C[1]``): (["a", "b"], "C"), for a cache variable C."""
    if not m.matches(stmt, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget()])])):
        return None
    assign = stmt.body[0]
    target, value = assign.targets[0].target, assign.value
    if not isinstance(target, (cst.Tuple, cst.List)) or not all(
        isinstance(e.value, cst.Name) for e in target.elements
    ):
        return None
    names = [e.value.value for e in target.elements]
    if isinstance(value, cst.Name) and value.value in caches:
        return names, value.value
    if isinstance(value, cst.Tuple) and len(value.elements) == len(names):
        reads = [_past_read(e.value) for e in value.elements]
        owners = {_indexed(e) for e in reads}
        indexes = [_index_of(e) for e in reads]
        if len(owners) == 1 and None not in owners and indexes == list(range(len(names))):
            owner = owners.pop()
            if owner in caches:
                return names, owner
    return None


def _past_read(node: cst.BaseExpression) -> cst.BaseExpression:
    """``C[i]`` of ``C[i].transpose(a, b)`` (the past read through a swap of two axes, literal ones) or of
    ``C[i].view(batch * heads, ...)`` (through a view that merges its two leading axes): a view whose layout the
    layout fact reads, :mod:`cachemigrate.facts.layout`; any other expression as it is."""
    if (
        m.matches(node, m.Call(func=m.Attribute(value=m.Subscript(), attr=m.Name("transpose"))))
        and len(node.args) == 2
        and all(a.keyword is None and not a.star and int_literal(a.value) is not None for a in node.args)
    ):
        return node.func.value
    return _merge_read(node)


def _merge_read(node: cst.BaseExpression) -> cst.BaseExpression:
    """``C[i]`` of ``C[i].view(batch * heads, ...)`` (or ``reshape``); any other expression as it is."""
    if merged_product(node) is not None and isinstance(node.func.value, cst.Subscript):
        return node.func.value
    return node


def _indexed(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Name) and len(node.slice) == 1:
        return node.value.value
    return None


def _index_of(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
        return int_literal(node.slice[0].slice.value)
    return None


def _single_index(stmt: cst.BaseStatement, caches: set[str], through: bool = False) -> tuple[str, str, int] | None:
    """``a = C[i]``: ("a", "C", i); with ``through``, ``C[i]`` read through a view merging batch and heads too."""
    if not m.matches(stmt, m.SimpleStatementLine(body=[m.Assign(targets=[m.AssignTarget(m.Name())])])):
        return None
    assign = stmt.body[0]
    read = _merge_read(assign.value) if through else assign.value
    owner, index = _indexed(read), _index_of(read)
    if owner in caches and index is not None:
        return assign.targets[0].target.value, owner, index
    return None


def _substitute(node: cst.CSTNode, replacements: Mapping[str, cst.BaseExpression]) -> cst.CSTNode:
    def rewrite(current):
        if isinstance(current, cst.Name) and current.value in replacements:
            return replacements[current.value]
        return current

    return rebuild(node, rewrite)


def _names(node: cst.CSTNode) -> list[str]:
    return [n.value for n in findall(node, m.Name())]


class FunctionViews:
    """The normalised views of one function: of each statement, of each expression in it, and of each block."""

    def __init__(
        self,
        function: cst.FunctionDef,
        caches: set[str],
        scope: RankScope,
        cache_rank: int | None = None,
    ) -> None:
        self.caches = set(caches)
        self.views: dict[cst.CSTNode, cst.CSTNode] = {}
        self.blocks: dict[cst.CSTNode, list[ViewStatement]] = {}
        self.origins: dict[cst.CSTNode, tuple[cst.BaseStatement, ...]] = {}  # view statement -> original run
        # a view that absorbed an unpack -> the later views that read the unpacked names: a rule that rewrites
        # the first must rewrite them too (the unpack goes with it)
        self.requires: dict[cst.CSTNode, list[cst.CSTNode]] = {}
        self.spelled: dict[cst.CSTNode, cst.CSTNode] = {}  # view node -> the original it normalises
        self.expressions = Expressions(self.caches, self._flags(function), cache_rank)
        self.expressions.scope = scope
        self.function = function
        self._block(function.body)

    def _flags(self, function: cst.FunctionDef) -> dict[str, cst.BaseExpression]:
        """Names assigned exactly once, from a test of a cache variable against None."""
        assigned: dict[str, list] = {}
        for assign in findall(function, m.Assign(targets=[m.AssignTarget(m.Name())])):
            assigned.setdefault(assign.targets[0].target.value, []).append(assign.value)
        for aug in findall(function, m.AugAssign(target=m.Name())):
            assigned.setdefault(aug.target.value, []).append(None)
        flags = {}
        for name, values in assigned.items():
            if len(values) != 1 or values[0] is None:
                continue
            value = values[0]
            if m.matches(
                value,
                m.Comparison(
                    left=m.Name(),
                    comparisons=[m.ComparisonTarget(m.Is() | m.IsNot() | m.Equal() | m.NotEqual(), m.Name("None"))],
                ),
            ):
                if value.left.value in self.caches:
                    flags[name] = Expressions(self.caches, {}, None)._comparison(value)
        return flags

    # -- building --------------------------------------------------------------------------------------------

    def _expression_view(self, node: cst.CSTNode) -> cst.CSTNode:
        def rewrite(current):
            new = self.expressions(current)
            return new

        return rebuild(node, rewrite)

    def _statement(self, stmt: cst.BaseStatement) -> cst.BaseStatement:
        """The view of one statement; a compound statement's blocks are viewed too, in code order."""
        if isinstance(stmt, cst.SimpleStatementLine):
            view = self._expression_view(stmt)
            for small in stmt.body:
                self.expressions.scope.statement(small)
            return view
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            return stmt
        header = {}
        if isinstance(stmt, (cst.If, cst.While)):
            header["test"] = self.expressions.test(self._expression_view(stmt.test))
        elif isinstance(stmt, cst.For):
            header["iter"] = self._expression_view(stmt.iter)
        return self._with_viewed_blocks(stmt, header)

    def _with_viewed_blocks(self, stmt: cst.BaseCompoundStatement, header: dict) -> cst.BaseStatement:
        changes = dict(header)
        body = self._viewed(stmt.body)
        if body is not stmt.body:
            changes["body"] = body
        orelse = getattr(stmt, "orelse", None)
        if isinstance(orelse, cst.If):
            new = self._statement(orelse)
            if new is not orelse:
                changes["orelse"] = new
        elif isinstance(orelse, cst.Else):
            block = self._viewed(orelse.body)
            if block is not orelse.body:
                changes["orelse"] = orelse.with_changes(body=block)
        handlers = getattr(stmt, "handlers", None)
        if handlers:
            viewed = [h.with_changes(body=self._viewed(h.body)) for h in handlers]
            changes["handlers"] = viewed
        final = getattr(stmt, "finalbody", None)
        if final is not None:
            changes["finalbody"] = final.with_changes(body=self._viewed(final.body))
        return stmt.with_changes(**changes) if changes else stmt

    def _viewed(self, block: cst.BaseSuite) -> cst.BaseSuite:
        """``block`` with its statements replaced by their views (computed now, in code order)."""
        if not isinstance(block, cst.IndentedBlock):
            return block
        views = self._block(block)
        nodes = [v.node for v in views]
        if len(nodes) == len(block.body) and all(a is b for a, b in zip(nodes, block.body)):
            return block
        return block.with_changes(body=tuple(nodes))

    def _record_expressions(self, original: cst.CSTNode, view: cst.CSTNode) -> None:
        """Map each original expression to its view, walking both trees where they have the same shape."""
        if original is view:
            return
        self.views[original] = view
        self.spelled[view] = original
        if type(original) is not type(view):
            return
        for field in dataclasses.fields(original):
            a, b = getattr(original, field.name), getattr(view, field.name, None)
            if isinstance(a, cst.CSTNode) and isinstance(b, cst.CSTNode):
                self._record_expressions(a, b)
            elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
                for x, y in zip(a, b):
                    if isinstance(x, cst.CSTNode) and isinstance(y, cst.CSTNode):
                        self._record_expressions(x, y)

    def _block(self, block: cst.BaseSuite) -> list[ViewStatement]:
        if not isinstance(block, cst.IndentedBlock):
            return []
        if block in self.blocks:
            return self.blocks[block]
        body = list(block.body)
        views: list[ViewStatement] = []
        index = 0
        pending: dict[str, cst.BaseExpression] = {}  # unpacked names folded into what follows
        holders: list[tuple[set[str], list]] = []  # per fold: its names, and [the view that holds it, readers...]
        start = None
        while index < len(body):
            stmt = body[index]
            folded = self._fold(body, index)
            if folded is not None:
                names, count = folded
                pending.update(names)
                holders.append((set(names), []))
                start = index if start is None else start
                for small in (s for k in range(index, index + count) for s in body[k].body):
                    self.expressions.scope.statement(small)
                index += count
                continue
            used = set(_names(stmt)) & set(pending)
            if used and isinstance(stmt, cst.SimpleStatementLine):
                view = self._statement(_substitute(stmt, pending))  # ranks and concatenations see C[i]
            else:
                view = self._statement(stmt)
                view = _substitute(view, pending) if used else view
            for names, readers in holders:
                if start is not None and not readers:
                    readers.append(view)  # this view absorbs the unpack statement(s)
                elif used & names:
                    readers.append(view)
            self._record_expressions(stmt, view)
            self.views[stmt] = view
            first = start if start is not None else index
            views.append(ViewStatement(view, first, index + 1 - first))
            self.origins[view] = tuple(body[first : index + 1])
            start = None
            index += 1
        for names, readers in holders:
            if readers:
                self.requires[readers[0]] = readers[1:]
        if start is not None:  # a fold with nothing after it: keep the original statements
            views.extend(ViewStatement(body[k], k, 1) for k in range(start, len(body)))
        self.blocks[block] = views
        return views

    def _fold(self, body: list, index: int) -> tuple[dict[str, cst.BaseExpression], int] | None:
        """An unpack of a cache variable at ``body[index]`` whose names are only read right after it, in this
        block: the names and the number of statements the unpack spans."""
        unpack = _unpacked(body[index], self.caches)
        count, positions, single = 1, None, False
        if unpack is None:
            first = _single_index(body[index], self.caches)
            second = _single_index(body[index + 1], self.caches) if first and index + 1 < len(body) else None
            if first and second and first[1] == second[1] and (first[2], second[2]) == (0, 1):
                unpack, count = ([first[0], second[0]], first[1]), 2
            elif index + 1 < len(body) and (first or _single_index(body[index], self.caches, through=True)):
                # `a = C[i]` (or `a = C[i].view(batch * heads, -1, head_dim)`) read by the next statement only
                first = first or _single_index(body[index], self.caches, through=True)
                unpack, positions, single = ([first[0]], first[1]), [first[2]], True
            else:
                return None
        names, owner = unpack
        if len(set(names)) != len(names) or owner in names:
            return None
        rest = body[index + count :] if not single else body[index + 1 : index + 2]
        if any(self._assigns(stmt, {*names, owner}) for stmt in rest):
            return None
        outside = [
            n for n in _names(self.function) if n in names
        ]  # every mention in the function: the unpack's own plus the reads right after it
        inside = [n for stmt in body[index : index + count] + rest for n in _names(stmt) if n in names]
        if len(outside) != len(inside) or single and len(inside) < 2:
            return None
        # the user's own Name node of the cache, so that a capture of it resolves to what other rules make of it
        owner_node = next((n for n in findall(body[index].body[0].value, m.Name(owner))), cst.Name(owner))
        replacements = {
            name: cst.Subscript(owner_node, [cst.SubscriptElement(cst.Index(cst.Integer(str(i))))])
            for i, name in zip(positions or range(len(names)), names)
        }
        value = body[index].body[0].value if count == 1 else None
        if isinstance(value, cst.Tuple):  # `a, b = C[0].transpose(-2, -1), C[1]`: `a` reads the view as written
            for name, element in zip(names, value.elements):
                if _past_read(element.value) is not element.value:
                    replacements[name] = element.value
        elif single and value is not None and _past_read(value) is not value:  # a lone read through a view
            replacements[names[0]] = value
        return replacements, count

    def _assigns(self, stmt: cst.CSTNode, names: set[str]) -> bool:
        targets = findall(stmt, m.AssignTarget() | m.AugAssign() | m.For())
        for target in targets:
            node = target.target
            if any(n in names for n in _names(node)):
                return True
        return False

    # -- lookup ----------------------------------------------------------------------------------------------

    def view(self, node: cst.CSTNode) -> cst.CSTNode:
        return self.views.get(node, node)

    def block(self, block: cst.CSTNode) -> list[ViewStatement]:
        if block not in self.blocks:
            return [ViewStatement(stmt, i, 1) for i, stmt in enumerate(getattr(block, "body", ()))]
        return self.blocks[block]

    def originals(self, value: object) -> object:
        """A captured value with every view statement in it turned back into the original statements it stands
        for (a captured block body is spliced back as the user wrote it)."""
        if isinstance(value, tuple):
            return tuple(original for item in value for original in self.origins.get(item, (item,)))
        if isinstance(value, cst.BaseStatement) and value in self.origins:
            run = self.origins[value]
            return run[0] if len(run) == 1 else run
        if isinstance(value, cst.CSTNode):
            return self.spelled.get(value, value)  # an expression as the user spelled it
        return value


def normalize_template(statements: list[cst.BaseStatement], caches: set[str]) -> list[cst.BaseStatement]:
    """The view of a rule's template statements, so that a rule written in any spelling matches the view of the
    code. ``caches`` are the (hole) names that stand for cache variables; no rank is known in a template."""
    function = cst.FunctionDef(cst.Name("template"), cst.Parameters(), cst.IndentedBlock(body=statements))
    views = FunctionViews(function, caches, RankScope())
    return [view.node for view in views.block(function.body)]


def normalize_template_expression(expression: cst.BaseExpression, caches: set[str]) -> cst.BaseExpression:
    statement = cst.SimpleStatementLine([cst.Expr(expression)])
    [view] = normalize_template([statement], caches)
    return view.body[0].value
