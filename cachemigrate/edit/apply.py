"""Applying a plan: every rule's edits in one libcst pass over the original tree.

Only the nodes on the way to an edit are visited; everything else is handed back as it is. Edits on the same
node compose in rule order; an edit inside the code another edit re-uses (a captured ``{body}``) is kept, because
build functions resolve captures to their edited form. A block whose statements were all removed is handled
here: an ``if`` with a side-effect-free test and no ``else`` goes, an emptied ``else`` goes, any other emptied
block gets ``pass``. Whatever the applier removes or reformats on its own is reported as an extra claim of the
rules that caused it, so the region audit (:mod:`cachemigrate.proof.audit`) covers it too.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import libcst as cst
import libcst.matchers as m

from .edits import Plan, Rename, Replace, Resolve, Splice


class Reformat:
    """How edited code is re-laid out when it no longer fits: one simple statement, or a ``def`` header."""

    def statement(self, stmt: cst.SimpleStatementLine, depth: int) -> cst.SimpleStatementLine:
        return stmt

    def header(self, compound: cst.BaseCompoundStatement, depth: int) -> cst.BaseCompoundStatement:
        """A ``def``, ``if`` or ``while`` whose header an edit changed (parameters, test)."""
        return compound


class ApplyError(RuntimeError):
    """An edit could not be applied (a bug in an action: its node is not where it said)."""


@dataclasses.dataclass
class Applied:
    module: cst.Module
    extra_claims: list[tuple[str, cst.CSTNode, str]]  # (rule, original node, "node"|"header") changed for rules
    changes: dict[str, int]  # rule -> number of edits applied


_PURE = (
    m.Name()
    | m.Attribute()
    | m.Comparison()
    | m.BooleanOperation()
    | m.UnaryOperation(operator=m.Not())
    | m.Integer()
    | m.SimpleString()
)


def _side_effect_free(test: cst.BaseExpression) -> bool:
    """Only names, attributes, comparisons, ``and``/``or``/``not`` and literals: dropping it changes nothing."""
    calls = m.findall(test, m.Call() | m.Subscript() | m.NamedExpr() | m.Await() | m.Yield() | m.Lambda())
    return not calls and m.matches(test, _PURE)


class _Applier(cst.CSTTransformer):
    def __init__(self, plan: Plan, reformat: Reformat | None) -> None:
        super().__init__()
        self.replaces: dict[cst.CSTNode, list[Replace]] = defaultdict(list)
        self.splices: dict[cst.CSTNode, list[Splice]] = defaultdict(list)
        self.ancestors: set[cst.CSTNode] = set()
        self.watch: set[cst.CSTNode] = set()
        self.renames: dict[cst.CSTNode, list[Rename]] = defaultdict(list)
        for edit in plan:
            self.ancestors.update(edit.path)
            if isinstance(edit, Rename):
                self.renames[edit.node].append(edit)
                continue
            self.watch.update(edit.captures)
            if isinstance(edit, Replace):
                self.replaces[edit.node].append(edit)
            else:
                self.splices[edit.block].append(edit)
                self.ancestors.add(edit.block)
                self.ancestors.update(edit.statements)  # so that edits inside the run are applied first
                self.watch.update(getattr(edit.block, "body", ()))
        self.results: dict[cst.CSTNode, object] = {}
        self.resolve = Resolve(self.results)
        self.reformat = reformat
        self.depth = 0
        # per open statement (simple, `if`/`while` header, `def` header): rules that asked to reformat it; None
        # for an open block (an edit in a block but not in a statement of it reformats nothing)
        self.open: list[list[str] | None] = []
        self.touched: dict[cst.CSTNode, set[str]] = {}  # original statement -> rules whose edits changed it
        self.pending = {e for e in plan.edits if not isinstance(e, Rename)}  # by identity; the plan keeps them
        self.functions: list[cst.CSTNode] = []  # the original FunctionDefs being visited
        self.extra_claims: list[tuple[str, cst.CSTNode, str]] = []
        self.changes: dict[str, int] = defaultdict(int)

    # -- traversal -------------------------------------------------------------------------------------------

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.IndentedBlock):
            self.depth += 1
            self.open.append(None)
        elif isinstance(node, (cst.SimpleStatementLine, cst.If, cst.While, cst.FunctionDef)):
            self.open.append([])
        if isinstance(node, cst.FunctionDef):
            self.functions.append(node)
        return node in self.ancestors

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode):
        result: object = updated
        if original in self.splices:
            result = self._spliced(original, result)
        for edit in self.replaces.get(original, ()):
            if isinstance(result, cst.RemovalSentinel):
                break
            built = self._renamed(edit.build(result, self.resolve))
            self.pending.discard(edit)
            self.changes[edit.rule] += 1
            self._mark(original, edit.rule)
            if edit.reformat and self.open and self.open[-1] is not None:
                self.open[-1].append(edit.rule)
            result = built
        if isinstance(original, cst.FunctionDef):
            self.functions.pop()
        if isinstance(original, cst.IndentedBlock):
            self.depth -= 1
            self.open.pop()
        elif isinstance(original, (cst.SimpleStatementLine, cst.If, cst.While, cst.FunctionDef)):
            asked = self.open.pop()
            if asked and self.reformat is not None and type(result) is type(original):
                simple = isinstance(original, cst.SimpleStatementLine)
                formatted = (
                    self.reformat.statement(result, self.depth) if simple else self.reformat.header(result, self.depth)
                )
                if formatted is not result:
                    part = "node" if simple else "header"
                    self.extra_claims.extend((rule, original, part) for rule in dict.fromkeys(asked))
                    result = formatted
        if isinstance(original, (cst.If, cst.For, cst.While, cst.With, cst.Try)) and not isinstance(
            result, cst.RemovalSentinel
        ):
            result = self._emptied(original, result)
        if original in self.watch:
            self.results[original] = result
        return result

    def _renamed(self, built):
        """Code a rule built inside a function whose parameter another rule renames reads the new name."""
        renames = [r for function in self.functions for r in self.renames.get(function, ())]
        if not renames or not isinstance(built, (cst.CSTNode, cst.FlattenSentinel)):
            return built
        mapping = {r.old: r.new for r in renames}
        if isinstance(built, cst.FlattenSentinel):
            return cst.FlattenSentinel([node.visit(_Renamer(mapping)) for node in built.nodes])
        return built.visit(_Renamer(mapping))

    def _mark(self, original: cst.CSTNode, rule: str) -> None:
        self.touched.setdefault(original, set()).add(rule)

    # -- splices --------------------------------------------------------------------------------------------

    def _spliced(self, original, updated):
        """Rebuild ``original``'s body from its statements' results, with the splices in place.

        The splices are also folded into the results of the block's own statements (a replaced run becomes its
        first statement's result, an insertion joins the statement it precedes), so that code which captured
        these statements, like a ``{body}`` of an enclosing rule, resolves to what they became."""
        body_of = list(original.body)
        covered: dict[int, Splice] = {}
        for edit in self.splices[original]:
            if edit.index + edit.count > len(body_of) or edit.index < 0:
                raise ApplyError(f"a splice of {edit.rule} reaches past the end of its block")
            for number in range(edit.index, edit.index + edit.count):
                if number in covered:
                    raise ApplyError(
                        f"{covered[number].rule} and {edit.rule} both rewrite statement number {number} "
                        f"({type(body_of[number]).__name__}) of one block"
                    )
                covered[number] = edit
        before: dict[int, list] = defaultdict(list)  # statements that go before original statement number i
        for edit in self.splices[original]:  # rule order within one index
            built = [self._renamed(stmt) for stmt in edit.build(self.resolve)]
            self.pending.discard(edit)
            self.changes[edit.rule] += 1
            for stmt in edit.statements:
                self._mark(stmt, edit.rule)
            before[edit.index].extend(built)
        tail = before.pop(len(body_of), [])
        for number, stmt in enumerate(body_of):
            own = [] if number in covered else self.resolve.statements([stmt])
            new = [*before.get(number, []), *own]
            if number == len(body_of) - 1:
                new.extend(tail)
            self.results[stmt] = cst.FlattenSentinel(new) if new else cst.RemoveFromParent()
        body = [*tail] if not body_of else self.resolve.statements(body_of)
        return updated.with_changes(body=body)

    # -- emptied blocks --------------------------------------------------------------------------------------

    def _removed_rules(self, statements) -> list[str]:
        return sorted({rule for s in statements for rule in self.touched.get(s, ())})

    def _emptied(self, original, result):
        body = getattr(result, "body", None)
        if not isinstance(body, cst.IndentedBlock) or body.body or not original.body.body:
            result = self._emptied_else(original, result)
            return result
        rules = self._removed_rules(original.body.body)
        emptied_else = (
            isinstance(result, cst.If)
            and isinstance(result.orelse, cst.Else)
            and not result.orelse.body.body
            and isinstance(original.orelse, cst.Else)
            and original.orelse.body.body
        )
        if emptied_else:  # `if x is None: <removed> else: <removed>`: nothing left to do either way
            rules = sorted({*rules, *self._removed_rules(original.orelse.body.body)})
        if (
            isinstance(original, cst.If)
            and (result.orelse is None or emptied_else)
            and _side_effect_free(original.test)
        ):
            self.extra_claims.extend((rule, original, "node") for rule in rules)
            self.touched[original] = set(rules)
            return cst.RemoveFromParent()
        result = result.with_changes(body=body.with_changes(body=[cst.SimpleStatementLine([cst.Pass()])]))
        return self._emptied_else(original, result)

    def _emptied_else(self, original, result):
        orelse = getattr(result, "orelse", None)
        if (
            isinstance(orelse, cst.Else)
            and not orelse.body.body
            and isinstance(original.orelse, cst.Else)
            and original.orelse.body.body
        ):
            rules = self._removed_rules(original.orelse.body.body)
            self.extra_claims.extend((rule, original.orelse, "node") for rule in rules)
            return result.with_changes(orelse=None)
        return result


class _Renamer(cst.CSTTransformer):
    """Renames variables (not attribute names, not keywords) in freshly built code."""

    def __init__(self, mapping: dict[str, str]) -> None:
        super().__init__()
        self.mapping = mapping

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        new = self.mapping.get(updated_node.value)
        return updated_node.with_changes(value=new) if new else updated_node

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
        return updated_node.with_changes(attr=original_node.attr)  # `x.layer_past` is not the variable

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        return updated_node.with_changes(keyword=original_node.keyword)  # nor is a keyword


def apply_plan(module: cst.Module, plan: Plan, reformat: Reformat | None = None) -> Applied:
    """The module with every edit of ``plan`` applied. Raises :class:`ApplyError` if an edit's node was not found
    where the plan said (the edit would silently be lost otherwise)."""
    if not len(plan):
        return Applied(module, [], {})
    applier = _Applier(plan, reformat)
    applier.ancestors.add(module)
    new = module.visit(applier)
    if applier.pending:
        lost = sorted({e.rule for e in applier.pending})
        raise ApplyError(f"edits of {', '.join(lost)} were not applied: their node is not where the rule said")
    return Applied(new, applier.extra_claims, dict(applier.changes))
