"""What every action shares: the context it runs in, scoping to the rule's role, and planning edits.

An action reads the ORIGINAL tree and plans edits on its nodes (:mod:`cachemigrate.edit.edits`); it never rewrites
the tree. The engine applies all rules' edits in one pass and audits that nothing else changed.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Sequence

import libcst as cst

from ..diagnostics import Diagnostic
from ..edit.edits import Edit, Replace, Resolve, Splice, remove
from ..traverse import children, walk
from .where import Where, arrive, depart, node_kind

if TYPE_CHECKING:
    from ..facts.analysis import ModuleInfo
    from ..rules.schema import Checker, Rule


@dataclasses.dataclass
class ActionContext:
    """What the engine hands an action: the analysis of the file, the functions and classes the rule applies
    to, the holes bound for each function, and a way to format inserted code."""

    path: str
    info: "ModuleInfo"
    locate: Callable[[cst.CSTNode | None], tuple[int, int]]
    functions: set[str]  # qualified names in scope
    classes: set[str]  # class names in scope
    bound: Callable[[str | None], dict[str, str]]  # qualified function name -> bound holes
    format_statements: Callable[[str, int], str]  # (python code, indent depth) -> formatted code
    line_length: int = 88
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # e.g. signature, deprecation_version
    diagnostics: list[Diagnostic] = dataclasses.field(default_factory=list)
    views: Any = None  # the file's normalised views (cachemigrate.rules.file_views.FileViews), for matching

    def error(self, rule: "Rule", where: str | None, message: str, node=None) -> None:
        """A diagnostic located at the (original) ``node``, by default the definition of function ``where``."""
        fn = self.info.functions.get(where) if where else None
        line, column = self.locate(node if node is not None else fn.node if fn else None)
        self.diagnostics.append(Diagnostic(self.path, line, column, rule.id, message))


class Action:
    """An action is configured by one rule and plans edits. Subclasses set ``name`` and ``PARAMS`` and return a
    :class:`Planner` from :meth:`planner`."""

    name: ClassVar[str]
    # parameter -> (python type, required, what is expected: for error messages)
    PARAMS: ClassVar[Mapping[str, tuple[type, bool, str]]] = {}
    REFUSES: ClassVar[bool] = False  # the action only reports (a precondition no rewrite can keep), never edits

    @classmethod
    def validate(cls, rule: "Rule", check: "Checker") -> None:
        check.unknown(set(cls.PARAMS), "params") if rule.params else None
        for key, (kind, required, expected) in cls.PARAMS.items():
            if required or key in rule.params:
                check.get(f"params.{key}", kind, expected)
        cls.check_params(rule, check)

    @classmethod
    def check_params(cls, rule: "Rule", check: "Checker") -> None:
        """Extra checks, e.g. that templates parse."""

    def __init__(self, rule: "Rule", ctx: ActionContext) -> None:
        self.rule = rule
        self.ctx = ctx
        self.edits: list[Edit] = []
        self.changes = 0  # matches found (one match may need several edits)

    def param(self, key: str, default: Any = None) -> Any:
        return self.rule.params.get(key, default)

    def planner(self) -> "Planner":
        raise NotImplementedError

    def prepare(self, module: cst.Module) -> bool:
        """What the action reads of the module before its planner walks it; False when the walk would find
        nothing (the action is not walked at all). Called once, before :meth:`plan` or the shared walk."""
        return True

    def plan(self, module: cst.Module) -> list[Edit]:
        if not self.prepare(module):
            return self.edits
        planner = self.planner()
        if planner.VISIT_EVERYTHING:
            walk(module, planner)
            return self.edits
        # only the classes and functions in scope are visited (the module itself is the root of every path)
        planner.stack.append(module)
        for stmt in module.body:
            if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)) and planner.wants(stmt):
                walk(stmt, planner)
        planner.stack.pop()
        return self.edits

    @classmethod
    def plans_by_walking(cls) -> bool:
        """The action plans with its :class:`Planner` in the shared walk (:func:`plan_together`), after its
        :meth:`prepare`, not with a :meth:`plan` of its own."""
        return cls.plan is Action.plan

    def helpers_needed(self) -> list[str]:
        """The rule's ``helpers`` (vendored definitions) that its edits use: all of them once it made any."""
        return list(self.rule.helpers) if self.edits else []

    def imports_needed(self) -> list[str]:
        """The imports its edits need (``plan_imports`` entries): the rule's ``imports`` once it made any."""
        return list(self.rule.imports) if self.edits else []

    def finalize(self, edits: Sequence[Edit]) -> None:
        """Called once every rule has planned, with all their edits: a last adjustment of this action's own."""


class Planner(cst.CSTVisitor):
    """A visitor of the original tree that knows the class and top-level function it is in and the path from the
    module down to the current node, to plan edits only within the rule's scope.

    Classes and functions out of scope are skipped whole, unless ``VISIT_EVERYTHING`` is set by an action that
    also edits call sites elsewhere in the file.

    At each node it visits, a planner's ``visit_<Node>`` is called, then :meth:`enter` (a planner that looks at
    every node overrides it); at each node it was called on, ``leave_<Node>``."""

    VISIT_EVERYTHING = False
    CLASS_LEVEL = False  # the planner edits classes themselves (attributes, bases, methods), not only functions
    # its own :meth:`enter` may act on trivia (whitespace, comments, punctuation, operators): the shared walk
    # (:mod:`cachemigrate.actions.together`) skips trivia only for planners whose ``enter`` says it does not
    ENTERS_TRIVIA = True

    def __init__(self, action: Action) -> None:
        super().__init__()
        self.action = action
        self.ctx = action.ctx
        self.where = Where()
        self._hooks: dict[type, tuple[Callable | None, Callable | None]] = {}
        self._enters: dict[type, bool] = {}

    @property
    def stack(self) -> list[cst.CSTNode]:
        """The module down to the node being visited, inclusive."""
        return self.where.stack

    @property
    def class_stack(self) -> list[str]:
        return self.where.class_stack

    @property
    def function_stack(self) -> list[str]:
        return self.where.function_stack

    @property
    def depth(self) -> int:
        """Indentation depth of the statements being visited."""
        return self.where.depth

    @property
    def current_class(self) -> str | None:
        class_stack = self.where.class_stack
        return class_stack[-1] if class_stack else None

    @property
    def current_function(self) -> str | None:
        function_stack = self.where.function_stack
        return function_stack[0] if function_stack else None

    def in_function_scope(self) -> bool:
        return self.current_function in self.ctx.functions

    def bound(self) -> dict[str, str]:
        return self.ctx.bound(self.current_function)

    def view(self, node: cst.CSTNode) -> cst.CSTNode:
        """The normalised view of an original node of the current function (for matching only)."""
        return self.ctx.views.view(node, self.current_function) if self.ctx.views is not None else node

    def originals(self, value: object) -> object:
        """A value captured from a view, with view statements turned back into the original ones."""
        views = self.ctx.views.of(self.current_function) if self.ctx.views is not None else None
        return views.originals(value) if views is not None else value

    def self_contained(self, run: Sequence) -> bool:
        """A run of view statements that can be rewritten on its own: no statement after it reads a name that an
        unpack folded into the run defined (the unpack goes away with the run)."""
        views = self.ctx.views.of(self.current_function) if self.ctx.views is not None else None
        if views is None:
            return True
        nodes = [v.node for v in run]
        return all(any(r is n for n in nodes) for v in nodes for r in views.requires.get(v, ()))

    def block_view(self, block: cst.CSTNode) -> list:
        """The normalised view of a block: ViewStatements, each standing for a run of original statements."""
        from ..views.normalize import ViewStatement

        if self.ctx.views is None:
            return [ViewStatement(stmt, i, 1) for i, stmt in enumerate(block.body)]
        return self.ctx.views.block(block, self.current_function)

    # -- traversal -------------------------------------------------------------------------------------------

    def wants(self, top: cst.CSTNode) -> bool:
        """A top-level class or function this rule may edit."""
        name = top.name.value
        if isinstance(top, cst.ClassDef):
            if self.CLASS_LEVEL and name in self.ctx.classes:
                return True
            return any(q.startswith(name + ".") for q in self.ctx.functions)
        return name in self.ctx.functions

    def hooks(self, kind: type) -> tuple[Callable | None, Callable | None]:
        """This planner's bound ``visit_<Node>`` and ``leave_<Node>`` for a node type (None where it has none),
        looked up once per type: what libcst's ``on_visit``/``on_leave`` look up at every node."""
        found = self._hooks.get(kind)
        if found is None:
            found = self._hooks[kind] = (self._hook(f"visit_{kind.__name__}"), self._hook(f"leave_{kind.__name__}"))
        return found

    def _hook(self, name: str) -> Callable | None:
        """The bound method ``name``, or None where it is libcst's own (``CSTVisitor`` defines every
        ``visit_<Node>``/``leave_<Node>`` as doing nothing and returning None: calling it changes nothing)."""
        method = getattr(self, name, None)
        if method is not None and getattr(type(self), name, None) is getattr(cst.CSTVisitor, name, object()):
            return None
        return method

    def skips(self, moved: str | None, name: str | None) -> bool:
        """Whether the node just entered is out of scope (``moved``, from :func:`arrive`: "class" for a class
        pushed on the class stack, "function" for a function pushed on the function stack, "statement" for any
        other module-level statement; None for any other node): it and its children are not visited."""
        if self.VISIT_EVERYTHING or moved is None:
            return False
        if moved == "class":
            return name not in self.ctx.classes and not any(q.startswith(name + ".") for q in self.ctx.functions)
        if moved == "function":
            function_stack = self.where.function_stack
            return len(function_stack) == 1 and function_stack[0] not in self.ctx.functions
        return True

    def enter(self, node: cst.CSTNode) -> bool:
        """Called at each node visited whose type it :meth:`enters`, after its ``visit_<Node>`` did not return
        False: False skips the children."""
        return True

    def enters(self, kind: type) -> bool:
        """Whether :meth:`enter` can do anything at a node of this type (asked once per type): where it cannot, it
        is not called, and the walk goes on into the node's children as if it had returned True."""
        return True

    def on_visit(self, node: cst.CSTNode) -> bool:
        """Track where we are, and skip whole classes and functions the rule does not apply to."""
        kind = type(node)
        moved, name = arrive(self.where, node, node_kind(kind))
        if self.skips(moved, name):
            return False
        visit = self.hooks(kind)[0]
        if visit is not None and visit(node) is False:
            return False
        enters = self._enters.get(kind)
        if enters is None:
            enters = self._enters[kind] = self.enters(kind)
        return self.enter(node) if enters else True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        leave = self.hooks(type(original_node))[1]
        if leave is not None:
            leave(original_node)
        depart(self.where, node_kind(type(original_node)))

    # -- planning --------------------------------------------------------------------------------------------

    def path_to(self, node: cst.CSTNode) -> tuple[cst.CSTNode, ...]:
        """The ancestors of ``node`` (exclusive), which must be the current node, one of its ancestors, or below it."""
        for index in range(len(self.stack) - 1, -1, -1):
            if self.stack[index] is node:
                return tuple(self.stack[:index])
        below = descend(self.stack[-1], node)
        if below is None:
            raise LookupError(f"{type(node).__name__} is not below the node being visited")
        return (*self.stack, *below)

    def replace(
        self,
        node: cst.CSTNode,
        build: Callable[[cst.CSTNode, Resolve], Any],
        captures: Sequence[cst.CSTNode] = (),
        reformat: bool = False,
    ) -> None:
        path = self.path_to(node)
        self.action.edits.append(Replace(self.action.rule.id, node, build, path, tuple(captures), reformat))

    def remove(self, node: cst.CSTNode) -> None:
        self.replace(node, remove)

    def splice(
        self,
        block: cst.CSTNode,
        index: int,
        count: int,
        build: Callable[[Resolve], Sequence[cst.BaseStatement]],
        captures: Sequence[cst.CSTNode] = (),
    ) -> None:
        """Replace ``count`` statements of ``block`` from ``index`` on (0: insert before ``index``)."""
        path = self.path_to(block)
        self.action.edits.append(Splice(self.action.rule.id, block, index, count, build, path, tuple(captures)))

    def insert(self, block: cst.CSTNode, index: int, statements: Sequence[cst.BaseStatement]) -> None:
        self.splice(block, index, 0, lambda resolve: list(statements))


def descend(root: cst.CSTNode, node: cst.CSTNode) -> tuple[cst.CSTNode, ...] | None:
    """The nodes strictly between ``root`` and its descendant ``node``, or None if it is not one."""
    for child in children(root):
        if child is node:
            return (root,)[1:]
        found = descend(child, node)
        if found is not None:
            return (child, *found)
    return None


def captured_nodes(values: Mapping[str, object]) -> list[cst.CSTNode]:
    """Every original node a capture dict holds (block bodies flattened), for :meth:`Planner.replace`."""
    nodes: list[cst.CSTNode] = []
    for value in values.values():
        if isinstance(value, tuple):
            nodes.extend(v for v in value if isinstance(v, cst.CSTNode))
        elif isinstance(value, cst.CSTNode):
            nodes.append(value)
    return nodes
