"""Where a walk of the original tree is (:class:`Where`), entered and left node by node (:func:`arrive`,
:func:`depart`), and the node-type checks the planners answer once per type (:func:`node_kind`, :func:`is_a`):
what a planner's own walk (:class:`cachemigrate.actions.base.Planner`) and the shared walk
(:mod:`cachemigrate.actions.together`) keep track of."""

from __future__ import annotations

import libcst as cst


class Where:
    """Where a walk is: the module down to the node being visited (inclusive), the class and the functions it is
    in, the indentation depth of the statements being visited. A planner's own, or shared by every planner of one
    walk (:mod:`cachemigrate.actions.together`): a planner is only called at nodes it visits, where both agree."""

    __slots__ = ("stack", "class_stack", "function_stack", "depth")

    def __init__(self) -> None:
        self.stack: list[cst.CSTNode] = []
        self.class_stack: list[str] = []
        self.function_stack: list[str] = []
        self.depth = 0


_KINDS: dict[type, tuple[bool, bool, bool, bool]] = {}


def node_kind(kind: type) -> tuple[bool, bool, bool, bool]:
    """(class, function, statement, indented block) for a node type: ``isinstance`` answered once per type (libcst's
    node classes are ABCs, whose ``isinstance`` costs a Python call each time)."""
    facts = _KINDS.get(kind)
    if facts is None:
        facts = _KINDS[kind] = (
            issubclass(kind, cst.ClassDef),
            issubclass(kind, cst.FunctionDef),
            issubclass(kind, cst.BaseStatement),
            issubclass(kind, cst.IndentedBlock),
        )
    return facts


_SUBTYPES: dict[tuple[type, type | tuple[type, ...]], bool] = {}


def is_a(node: object, cls: type | tuple[type, ...]) -> bool:
    """``isinstance(node, cls)``, answered once per node type and class (libcst's node classes are ABCs)."""
    key = (type(node), cls)
    found = _SUBTYPES.get(key)
    if found is None:
        found = _SUBTYPES[key] = issubclass(type(node), cls)
    return found


def arrive(where: Where, node: cst.CSTNode, kind: tuple[bool, bool, bool, bool]) -> tuple[str | None, str | None]:
    """Enter ``node`` (whose :func:`node_kind` is ``kind``): push it, its class or function, count its block.
    Returns what :meth:`Planner.skips` reads: which stack moved ("class", "function", "statement" for another
    module-level statement, or None) and the class's name."""
    where.stack.append(node)
    is_class, is_function, is_statement, is_block = kind
    moved = name = None
    if is_class and not where.function_stack:
        name = node.name.value
        where.class_stack.append(name)
        moved = "class"
    elif is_function:
        class_stack, function_stack = where.class_stack, where.function_stack
        owner = class_stack[-1] if len(class_stack) == 1 and not function_stack else None
        function_stack.append(f"{owner}.{node.name.value}" if owner else node.name.value)
        moved = "function"
    elif is_statement and not where.class_stack and not where.function_stack:
        return "statement", None  # module-level statements other than classes and functions
    if is_block:
        where.depth += 1
    return moved, name


def depart(where: Where, kind: tuple[bool, bool, bool, bool]) -> None:
    """Leave the node :func:`arrive` entered (once its ``leave_<Node>`` hooks ran)."""
    is_class, is_function, _, is_block = kind
    if is_block:
        where.depth -= 1
    if is_function:
        where.function_stack.pop()
    elif is_class and not where.function_stack:
        where.class_stack.pop()
    where.stack.pop()
