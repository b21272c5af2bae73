"""What the engine refuses before libcst sees a file: code Python itself rejects, and expressions nested too deep.

Python's own parser (:func:`ast.parse`, in C: fast, and the authority on what is valid) reads the file first:

* A syntax error is reported where Python reports it, with Python's message (CM902).
* An expression nested deeper than :data:`MAX_DEPTH` levels (100 nested calls, a sum of thousands of terms, which
  libcst parses in time that grows steeply with its length and walks by recursion) is refused (CM910) at the line
  of the expression, before any time is spent on it. Python itself gives up on the deepest ones (a RecursionError
  while it builds the tree): those are refused the same way. The modeling files of transformers nest at most 14.
"""

from __future__ import annotations

import ast

from .. import diagnostics as codes
from ..diagnostics import Diagnostic

MAX_DEPTH = 50  # levels of expressions inside expressions; the engine handles 70 nested calls, not 100


def check(code: str, path: str) -> Diagnostic | None:
    """The diagnostic that keeps ``code`` from the engine, or None."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        column = max(exc.offset or 1, 1)
        return Diagnostic(path, exc.lineno or 1, column, codes.PARSE_ERROR, f"not valid Python: {exc.msg}")
    except (RecursionError, MemoryError):
        return _too_deep(path, _longest_line(code), None)
    depth, where = deepest(tree)
    if depth > MAX_DEPTH:
        return _too_deep(path, (where.lineno, where.col_offset + 1), depth)
    return None


def deepest(tree: ast.AST) -> tuple[int, ast.expr | None]:
    """The most levels of expressions nested in one another, and the outermost expression of that nesting."""
    best: tuple[int, ast.expr | None] = (0, None)
    stack: list[tuple[ast.AST, int, ast.expr | None]] = [(tree, 0, None)]
    while stack:  # no recursion: the tree may be deeper than Python's recursion limit
        node, depth, outer = stack.pop()
        if isinstance(node, ast.expr):
            depth, outer = depth + 1, outer or node
            if depth > best[0]:
                best = (depth, outer)
        else:
            depth, outer = 0, None
        stack.extend((child, depth, outer) for child in ast.iter_child_nodes(node))
    return best


def _longest_line(code: str) -> tuple[int, int]:
    lines = code.splitlines() or [""]
    index = max(range(len(lines)), key=lambda i: len(lines[i]))
    return index + 1, 1


def _too_deep(path: str, where: tuple[int, int], depth: int | None) -> Diagnostic:
    how = f"nests {depth} levels deep" if depth else "is nested too deep for Python's own parser"
    return Diagnostic(
        path,
        *where,
        codes.TOO_DEEP,
        f"this expression {how} (cachemigrate takes at most {MAX_DEPTH}): the file was left unchanged. Split it "
        "into smaller expressions (name the parts), or mark the file `# cachemigrate: skip` and migrate it by hand",
    )
