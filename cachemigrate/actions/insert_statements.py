"""``insert_statements``: insert a template block at an anchor of a function.

Anchors:
  ``function_start``    after the docstring
  ``before_first_use``  before the first top-level statement that reads ``{cache}``; every name in
                        ``after_assignments`` that the function assigns must be assigned before that point, so
                        that the block never reads a variable before it exists
  ``after_loop``        after the top-level ``for`` loop over ``{layers}`` (the block ModuleList)
  ``before_first_tuple_use``  before the first top-level statement that uses ``{cache}`` as a tuple (indexing,
                        unpacking, ``torch.cat``...): statements before it that only hand the cache on (an sdpa
                        class's fallback ``return super().forward(..., past_key_value, ...)``) still see it as
                        it came in; ``after_assignments`` as above
  ``after_last_assignment``  after the last top-level statement that assigns a name of ``after_assignments``
                        (``use_cache = False`` under gradient checkpointing, say), and after the block of the rule
                        ``after_rule`` if it is in the same function
  ``after_handoff``     after the top-level statement of a head's forward that binds what its library model returns
                        (``outputs = self.transformer(...)``, ``{outputs}``; :mod:`cachemigrate.facts.heads`)

``with_parameters`` (names) makes the insertion conditional: only in functions that take every one of them as a
parameter (a block that resets ``position_ids`` where the function has such a parameter, say); ``without_names``:
only in functions that neither take nor assign any of them (an attention with no cross-attention flag);
``passing_beside_var_kwargs``: only in functions that hand one of them as a keyword beside their own ``**kwargs``.

``moves`` (a statement template) makes the insertion conditional: it happens only in functions where exactly one
top-level statement matches, whose targets nothing else in the function assigns; that statement is removed and
its captures fill the template. A value computed from the cache late in the function is computed at the anchor
instead (before other rules' edits make the cache change in between).

Blocks anchored ``before_first_use`` or ``after_last_assignment`` also precede the statements that OTHER rules
make read the cache (see :meth:`InsertStatements.finalize`). Where such a statement comes before the last
assignment of an ``after_assignments`` name (bloom's ``presents = () if use_cache else None`` above the
gradient-checkpointing ``use_cache = False``), an ``after_last_assignment`` block stays after the assignment and
the statement moves down below it, if it is a plain assignment nothing in between can tell from the original
(:func:`.moves.move_after_block`); otherwise the rule reports it and the file is left as it is. Where the last
assignment is the older spelling of the gradient-checkpointing switch, inside the loop over the blocks
(:func:`cachemigrate.facts.caching_switch.loop_switch`), the switch moves up instead: it goes first in the
inserted block, under its own test, and leaves the loop.
"""

from __future__ import annotations

import functools

import libcst as cst
import libcst.matchers as m

from ..views.patterns import TemplateError, code_of, compile_statements, match_statements, to_python
from ..facts.heads import head_of
from ..facts.caching_switch import hands_no_cache_there as _hands_no_cache_there, loop_switch
from ..facts.layer_loops import accessors
from ..facts.one_layer import after_single_layer
from .base import Action, Planner
from .helpers import check_holes, depth_of, filled_and_formatted, passes_beside_var_kwargs
from .moves import assigns as _assigns, crossed_reads, hoist_into, hoisted_switch, move_after_block
from ..traverse import findall

ANCHORS = ("function_start", "before_first_use", "after_loop", "after_last_assignment", "before_first_tuple_use")
ANCHORS += ("after_handoff",)  # after the statement of a head handing the past to its library model (facts/heads.py)


def _late_assignment(stmt: cst.CSTNode, name: str, cache: str, first_read: str, locate) -> tuple:
    """(the last assignment of ``name`` in ``stmt``, the words of the diagnostic that says where it is and why the
    cache set-up cannot go before it)."""
    found = findall(stmt, m.AssignTarget(m.Name(name)) | m.AugAssign(target=m.Name(name)))
    node = found[-1]
    line = locate(node)[0]
    inside = " inside the loop over the blocks" if isinstance(stmt, cst.For) else ""
    words = (
        f"`{name}` is assigned at line {line}{inside}, after {first_read}; the cache "
        f"set-up must come after the last assignment of `{name}` (gradient checkpointing turns caching off there: a "
        "cache made before would be updated again when the checkpointed blocks run a second time in the backward "
        f"pass) and before the first read of `{cache}`; "
        + ("move that assignment before the loop, as BART's decoder does" if inside else "move that assignment up")
    )
    return node, words


def _takes(function: cst.FunctionDef, name: str) -> bool:
    """``name`` is a parameter of the function (positional, keyword-only, or ``*name`` / ``**name``)."""
    params = function.params
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    every += [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
    return any(p.name.value == name for p in every)


def _binds(function: cst.FunctionDef, name: str) -> bool:
    """``name`` is a parameter of the function or assigned somewhere in its body."""
    if _takes(function, name):
        return True
    binders = findall(function.body, m.AssignTarget() | m.AugAssign() | m.AnnAssign() | m.For() | m.NamedExpr())
    return any(findall(b.target, m.Name(name)) for b in binders) or any(
        w.asname is not None and findall(w.asname, m.Name(name)) for w in findall(function.body, m.WithItem())
    )


def _reads(stmt: cst.CSTNode, name: str) -> bool:
    return bool(findall(stmt, m.Name(name)))


@functools.lru_cache(maxsize=256)
def _template_names(template: str) -> frozenset[str]:
    """The names a statement template's code reads or binds (parsed once per process and template text)."""
    return frozenset(n.value for n in findall(cst.parse_module(to_python(template)), m.Name()))


def _mentions(expression: cst.CSTNode, code: str) -> bool:
    """``expression`` holds a name or attribute that is exactly ``code`` (``self.h`` is not in ``self.heads``)."""
    return any(code_of(node) == code for node in findall(expression, m.Name() | m.Attribute()))


def _loops_over(loop: cst.For, layers: str, getters: set[str] = frozenset()) -> bool:
    """``for block in self.h:`` (the iterable mentions the layers), or a loop over something else whose body reads
    ``self.h[i]`` with a loop variable: ``for i in range(n):`` (BLIP's text encoder and the Q-Formers), ``for layer,
    past in enumerate(pasts):`` (GPTSAN), or takes its layer with the loop variable through a method of the class
    that returns one (``getters``, :func:`cachemigrate.facts.layer_loops.accessors`: ``self._get_layer(i)``)."""
    if _mentions(loop.iter, layers):
        return True
    indices = {node.value for node in findall(loop.target, m.Name())}  # `i`, or `layer` of `layer, past`
    for node in findall(loop.body, m.Call()):
        if code_of(node.func) in getters and any(_reads(a.value, i) for a in node.args for i in indices):
            return True
    for node in findall(loop.body, m.Subscript()):
        if code_of(node.value) == layers and len(node.slice) == 1:
            part = node.slice[0].slice
            if isinstance(part, cst.Index) and isinstance(part.value, cst.Name) and part.value.value in indices:
                return True
    return False


def _is_docstring(stmt: cst.CSTNode) -> bool:
    return m.matches(stmt, m.SimpleStatementLine(body=[m.Expr(m.SimpleString() | m.ConcatenatedString())]))


class InsertStatements(Action):
    name = "insert_statements"
    PARAMS = {
        "template": (str, True, "the statements to insert, as a template"),
        "anchor": (str, True, f"one of {', '.join(ANCHORS)}"),
        "after_assignments": (list, False, "names that must be assigned before the inserted block"),
        "after_rule": (str, False, "a rule whose inserted block, in the same function, must come first"),
        "moves": (str, False, "a statement template: insert only where one statement matches, and remove it"),
        "with_parameters": (list, False, "parameter names: insert only in functions that take all of them"),
        "without_names": (list, False, "names: insert only in functions that neither take nor assign any of them"),
        "passing_beside_var_kwargs": (list, False, "names: insert only where a call hands one beside `**kwargs`"),
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        check.choice("params.anchor", ANCHORS)
        try:
            compile_statements(rule.params["template"])
        except TemplateError as exc:
            raise check.fail("params.template", f"valid statements ({exc})") from None
        moved = set()
        if "moves" in rule.params:
            try:
                moved = compile_statements(rule.params["moves"]).holes()
            except TemplateError as exc:
                raise check.fail("params.moves", f"a valid statement template ({exc})") from None
        check_holes(check, "params.template", rule.params["template"], moved)

    def __init__(self, rule, ctx) -> None:
        super().__init__(rule, ctx)
        self.deferred: list = []  # (insert edit, cache name, function) of `before_first_use` anchors
        self.hoisted: list = []  # (insert edit, removal edit, loop, flag) of switches moved out of the loop

    def planner(self) -> Planner:
        return _Planner(self)

    def finalize(self, edits) -> None:
        """A ``before_first_use`` block must also precede statements that OTHER rules make read the cache (the
        presents accumulator that becomes the cache itself, say): the insertion point moves up to the first
        statement of the function that reads the cache once every rule's edits are applied."""
        for insert, cache, function in self.deferred:
            body = insert.block.body
            after = self.param("after_rule")
            if after:  # the other rule's block in this function goes first (same index: rule order)
                theirs = [e for e in edits if e.rule == after and getattr(e, "block", None) is insert.block]
                if theirs:
                    insert.index = max(insert.index, max(e.index for e in theirs))
            none_safe = self.param("anchor") == "after_last_assignment"  # it only creates a missing cache
            reads = [
                i for i in range(insert.index) if _edited_to_read(edits, insert, i, cache, none_safe, skip={after})
            ]
            if not reads:
                continue
            first = reads[0]
            names = self.param("after_assignments", [])
            if none_safe and move_after_block(edits, insert, reads, cache, names):
                continue
            for name in names:
                late = [
                    stmt
                    for stmt in body[first : insert.index]
                    if _assigns(stmt, name) and not _hands_no_cache_there(stmt, name, cache)
                ]
                switch = loop_switch(late[-1], name) if len(late) == 1 else None
                if switch is not None:  # the older spelling of the switch, inside the loop: it moves up
                    self._hoist(insert, switch)
                    continue
                if late:
                    read = f"line {self.ctx.locate(body[first])[0]}, which the migration makes read `{cache}`"
                    node, words = _late_assignment(late[-1], name, cache, read, self.ctx.locate)
                    self.ctx.error(self.rule, function, f"cannot insert the cache set-up in {function}: {words}", node)
                    self.edits.remove(insert)
                    break
            else:
                insert.index = first
                self._hoisted_over(insert, reads, cache, function)

    def _hoist(self, insert, switch) -> None:
        """The block found the switch inside the loop only once every rule planned (another rule makes a statement
        above the loop read the cache): the switch goes first in the block and leaves the loop."""
        self.edits.append(hoist_into(insert, switch, self.rule.id))
        self.hoisted.append((insert, self.edits[-1], switch.loop, switch.name))

    def _hoisted_over(self, insert, reads: list, cache: str, function: str) -> None:
        """A switch moved out of the loop comes before the statements between the block and the loop: one of them
        that reads the flag, other than those the migration makes read the cache, keeps the file refused."""
        for made, removal, loop, flag in self.hoisted:
            crossed = crossed_reads(insert, loop, flag, reads) if made is insert else []
            if crossed:
                read = f"line {self.ctx.locate(insert.block.body[crossed[0]])[0]}, which reads `{flag}`"
                node, words = _late_assignment(loop, flag, cache, read, self.ctx.locate)
                self.ctx.error(self.rule, function, f"cannot insert the cache set-up in {function}: {words}", node)
                self.edits.remove(insert)
                self.edits.remove(removal)


class _Planner(Planner):
    def _tuple_uses(self) -> set:
        """The Name nodes of the function's uses of its cache as a tuple (from the analysis)."""
        fn = self.ctx.info.functions.get(self.current_function)
        return {use.node for use in fn.legacy()} if fn is not None else set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self.current_function not in self.ctx.functions or len(self.function_stack) != 1:
            return
        action: InsertStatements = self.action
        bound = self.bound()
        body = list(node.body.body)
        if not all(_takes(node, name) for name in action.param("with_parameters", [])):
            return
        if any(_binds(node, name) for name in action.param("without_names", [])):
            return
        beside = action.param("passing_beside_var_kwargs")
        if beside and not passes_beside_var_kwargs(node, beside):
            return
        moved = None
        if action.param("moves"):
            moved = self._moved(node, body, bound)
            if moved is None:
                return
        self.switch = None
        index = self._index(body, bound, node)
        if index is None:
            return
        values = dict(bound)
        if moved is not None:
            values.update(moved[1])
            if moved[0] < index:
                return  # already computed before the anchor: nothing to move
        new = filled_and_formatted(self.ctx, action.param("template"), values, depth_of(self.current_function))
        if _already_there(body, new):
            return
        action.changes += 1
        if self.switch is not None:  # the older spelling of the switch leaves the loop, to go before the set-up
            new = [hoisted_switch(self.switch), *new]
        self.insert(node.body, index, new)
        made = action.edits[-1]
        if self.switch is not None:
            self.remove(self.switch.switch)
            action.hoisted.append((made, action.edits[-1], self.switch.loop, self.switch.name))
        if moved is not None:
            self.remove(body[moved[0]])
        if action.param("anchor") in ("before_first_use", "after_last_assignment"):
            action.deferred.append((made, bound["cache"], self.current_function))

    def _moved(self, node: cst.FunctionDef, body: list, bound: dict) -> tuple[int, dict] | None:
        """(index, captures) of the one top-level statement matching ``moves``, if its targets are assigned
        nowhere else in the function."""
        pattern = compile_statements(self.action.param("moves"))
        views = self.block_view(node.body)
        statements = [v.node for v in views]
        found = []
        for position, view in enumerate(views):
            captures = match_statements(pattern, statements, position, bound)
            if captures is not None and view.count == 1 and len(pattern.matchers) == 1:
                found.append((view.start, {k: self.originals(v) for k, v in captures.items()}))
        if len(found) != 1:
            return None
        index, captures = found[0]
        targets = {n.target.value for n in findall(body[index], m.AssignTarget(m.Name()))}
        assigned = [n for n in findall(node.body, m.AssignTarget(m.Name()) | m.AugAssign(target=m.Name()))]
        if sum(1 for n in assigned if n.target.value in targets) != len(targets):
            return None
        return index, captures

    def _index(self, body: list, bound: dict, node: cst.FunctionDef) -> int | None:
        action: InsertStatements = self.action
        anchor = action.param("anchor")
        start = 1 if body and _is_docstring(body[0]) else 0
        if anchor == "function_start":
            return start
        if anchor == "after_last_assignment":
            # assignments in or after the loop over the blocks come too late for a cache the loop hands on
            # (Idefics sets `use_cache = False` again inside its layer loop)
            names = action.param("after_assignments", [])
            layers = bound.get("layers")
            loop = next(
                (i for i, s in enumerate(body) if isinstance(s, cst.For) and layers and _mentions(s.iter, layers)),
                len(body),
            )
            assigning = [i for i, s in enumerate(body[:loop]) if any(_assigns(s, n) for n in names)]
            return max(max(assigning, default=start - 1) + 1, start)
        if anchor == "after_handoff":
            head = head_of(self.ctx.info, self.current_class)
            return head.handoff + 1 if head is not None and head.outputs else None
        if anchor == "after_loop":
            layers = bound.get("layers")
            cls = self.ctx.info.classes.get(self.current_class or "")
            getters = accessors(cls, layers, positional=False) if cls is not None and layers else set()
            for index, stmt in enumerate(body):
                if isinstance(stmt, cst.For) and layers and _loops_over(stmt, layers, getters):
                    return index + 1
            return after_single_layer(cls, body)
        cache = bound["cache"]
        if anchor == "before_first_tuple_use":
            legacy = self._tuple_uses()
            first_use = next((i for i, s in enumerate(body) if i >= start and _holds_any(s, legacy)), None)
        else:
            first_use = next((i for i, s in enumerate(body) if i >= start and _reads(s, cache)), None)
        if first_use is None:
            return None
        template = action.param("template")
        for name in action.param("after_assignments", []):
            if name in _template_names(template) and not _binds(node, name):
                return None  # the block reads a name the function lacks (an attention with no cross flag)
            late = next(
                (i for i, s in enumerate(body) if _assigns(s, name) and not _hands_no_cache_there(s, name, cache)),
                None,
            )
            if late is not None and late >= first_use:
                if not isinstance(body[late], cst.For):  # a plain late assignment: the message says so
                    self.ctx.error(
                        action.rule,
                        self.current_function,
                        f"cannot insert the cache set-up in {self.current_function}: `{cache}` is read before "
                        f"`{name}` is assigned, and the set-up needs both; move the `{name}` assignment up",
                    )
                    return None
                last = max(i for i, s in enumerate(body) if _assigns(s, name))
                switch = loop_switch(body[late], name) if last == late and self.switch is None else None
                if switch is not None:  # the older spelling of the gradient-checkpointing switch: it moves up
                    self.switch = switch
                    continue
                read = f"the statement at line {self.ctx.locate(body[first_use])[0]}, which reads `{cache}`"
                where, words = _late_assignment(body[last], name, cache, read, self.ctx.locate)
                self.ctx.error(
                    action.rule,
                    self.current_function,
                    f"cannot insert the cache set-up in {self.current_function}: {words}",
                    where,
                )
                return None
        return first_use


def _holds_any(stmt: cst.CSTNode, nodes: set) -> bool:
    return any(name in nodes for name in findall(stmt, m.Name()))


def _tests_none(stmt: cst.CSTNode, cache: str) -> bool:
    """``if cache is None: ... else: ...``, ``if cache is not None: ...``, ``if isinstance(cache, X): ...``: what
    it reads of the cache only runs when there is one (a block that only creates a missing cache need not
    precede it)."""
    check = m.Comparison(left=m.Name(cache), comparisons=[m.ComparisonTarget(m.Is() | m.IsNot(), m.Name("None"))])
    check |= m.Call(func=m.Name("isinstance"), args=[m.Arg(m.Name(cache)), m.Arg()])  # False for None
    if m.matches(stmt, m.If(test=check)):
        return True
    # `n = <reads cache> if cache is not None else 0`
    guarded = m.Assign(value=m.IfExp(test=check)) | m.AugAssign(value=m.IfExp(test=check))
    return m.matches(stmt, m.SimpleStatementLine(body=[guarded]))


def _edited_to_read(edits, insert, index: int, cache: str, none_safe: bool = False, skip=frozenset()) -> bool:
    """Some other edit rewrites statement ``index`` of the insert's block (or code inside it) into code that reads
    ``cache``. Edits are built dry, with captures as they are in the original. With ``none_safe``, reads that only
    run when there is a cache (under ``if cache is not None``, ``isinstance(cache, ...)``) do not count. Edits of
    the rules in ``skip`` (the ``after_rule``, whose block goes first by design) do not count either."""
    from ..edit.edits import Replace, Resolve, Splice

    stmt = insert.block.body[index]
    if none_safe and _tests_none(stmt, cache):
        return False
    dry = Resolve({})
    for edit in edits:
        if edit is insert or edit.rule == insert.rule or edit.rule in skip:
            continue
        if isinstance(edit, Replace) and (edit.node is stmt or stmt in edit.path):
            built = edit.build(edit.node, dry)
            nodes = list(built.nodes) if isinstance(built, cst.FlattenSentinel) else [built]
        elif (
            isinstance(edit, Splice)
            and edit.block is insert.block
            and edit.index <= index < edit.index + max(1, edit.count)
        ):
            nodes = [n for n in edit.build(dry) if not (none_safe and _tests_none(n, cache))]
        elif isinstance(edit, Splice) and stmt in edit.path:
            nodes = list(edit.build(dry))
        else:
            continue
        if any(isinstance(n, cst.CSTNode) and _reads(n, cache) for n in nodes):
            return True
    return False


def _already_there(body: list, new: list) -> bool:
    """The block is already present (running the migration twice changes nothing)."""
    wanted = [code_of(s) for s in new]
    have = [code_of(s) for s in body]
    return any(have[i : i + len(wanted)] == wanted for i in range(len(have) - len(wanted) + 1))
