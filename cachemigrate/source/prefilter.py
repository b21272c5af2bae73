"""The prefilter: answer "nothing to migrate" for a file without libcst, when that answer is certain.

Most modeling files of a transformers tree have no tuple-cache code: they never name a cache, or they use the
Cache API already (``past_key_values.get_seq_length()``, ``past_key_values is None``, handing it on as an
argument). The engine reports such files ``clean`` after a full libcst parse and analysis; this module gives the
same verdict from Python's own parser (``ast``, in C, about a twentieth of a libcst round trip) or from the text
alone, and the engine is only run where the verdict is not certain.

It is safe by construction: :func:`nothing_to_migrate` is True only when every use of a cache variable in the file
is one that :mod:`cachemigrate.facts.analysis` classifies as *not* legacy, judged by the same rules and stricter where
the two trees differ. In detail:

* a *cache variable* is what the analysis takes for one, and more: a parameter of ANY function (nested, async,
  any depth) named like a cache (the era's ``cache_names``), and every name an assignment binds from one (also
  ``y = a if c else x`` and ``a, y = b, x``), to a fixed point, wherever in the function it stands;
* a use is *safe* only in a form the analysis calls ``check``, ``api``, ``pass`` or ``alias``: an attribute
  (``x.update(...)``), a comparison with ``None`` by ``is``/``is not``/``==``/``!=``, a truth test (``if x``,
  ``not x``, the first operand of ``and``/``or``, or a later one when the whole is a truth test), a positional or
  keyword argument of a call that is not ``zip``/``len``/``tuple``... (a builtin that consumes a tuple), a
  ``return``, an element of a tuple/list/set literal that is not a subscript, a key or value of a dict literal,
  a branch of a conditional expression, the whole value of an assignment to plain names, a binding target;
* a module that patches a class imported from transformers (a top-level function taking a cache set on its
  attribute, or a subclass of such a class named like an attention overriding ``forward`` with a cache parameter)
  is never certain: the engine migrates
  such a patch to the library's keyword for the cache even where it is on the Cache API; nor is a head over a
  library model (a subclass of a ``*PreTrainedModel`` imported from transformers with a method taking a cache),
  whose presence tests the engine rewrites though they are safe uses here;
* anything else is not safe (indexing, unpacking, iterating, ``*x``, arithmetic, ``del``, ``with``, an
  f-string, a comprehension's source...), nor is any ``isinstance(x, Cache)`` guard taken into account (the
  engine excuses code under one; this module does not), nor is a file that ``ast`` cannot parse.

``tests/test_prefilter.py`` checks the claim on every fixture and on real modeling files: whatever this module
calls clean, the engine reports clean. ``bench/robustness.py`` checks it on a whole transformers tree.
This module imports neither libcst nor the engine.
"""

from __future__ import annotations

import ast
import functools
import re
import warnings
from typing import Iterable, Sequence

# As in cachemigrate.facts.analysis: builtins whose argument is consumed as a tuple (a legacy use), whatever else is
# passed on to a call is handed on unchanged.
CONSUMING_BUILTINS = frozenset(
    {"zip", "len", "enumerate", "tuple", "list", "iter", "map", "reversed", "sum", "any", "all", "sorted", "next"}
)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_EQUALITY = (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)


@functools.lru_cache(maxsize=None)
def _words(cache_names: tuple[str, ...]) -> re.Pattern:
    return re.compile(r"\b(?:%s)\b" % "|".join(map(re.escape, sorted(cache_names, key=len, reverse=True))))


def nothing_to_migrate(text: str, cache_names: Sequence[str]) -> bool:
    """True when the file certainly has no legacy cache use, so the engine would report it clean. False means
    "not certain": the engine must look."""
    names = tuple(cache_names)
    if not names or not _words(names).search(text):
        return True  # no cache name as a word anywhere (comments and strings included): no cache variable
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like: not our business here
            tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False  # let the engine say what is wrong
    wanted = frozenset(names)
    if _patches_a_class(tree, wanted):
        return False  # a patch of a library attention follows the library's keyword, Cache API or not
    for node in ast.walk(tree):
        if isinstance(node, _FUNCTIONS) and wanted.intersection(_parameters(node)):
            if not _function_is_safe(node, wanted):
                return False
    return True


def _patches_a_class(tree: ast.Module, cache_names: frozenset[str]) -> bool:
    """The module sets a top-level function that takes a cache on an attribute of a class imported from transformers
    (``GPT2Attention.forward = f``), or subclasses such a class named like an attention with a ``forward`` that takes
    a cache: a patch of a library class (:mod:`cachemigrate.facts.patches`) is migrated to the library's keyword even
    where it is on the Cache API. (Relative imports are a model's own package, never the library.)"""
    library = _library_names(tree)
    if not library:
        return False
    takes = {
        node.name for node in tree.body if isinstance(node, _FUNCTIONS) and cache_names.intersection(_parameters(node))
    }
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in takes:
            if any(isinstance(t, ast.Attribute) and _root(t.value) in library for t in node.targets):
                return True
        if isinstance(node, ast.ClassDef):
            bases = [b for b in node.bases if _library_class(b, library).endswith("Attention")]
            forward = [i for i in node.body if isinstance(i, _FUNCTIONS) and i.name == "forward"]
            if bases and forward and cache_names.intersection(_parameters(forward[0])):
                return True
            if any(_library_class(b, library).endswith("PreTrainedModel") for b in node.bases):
                methods = [i for i in node.body if isinstance(i, _FUNCTIONS)]
                if any(cache_names.intersection(_parameters(i)) for i in methods):
                    return True  # a head over a library model (facts/heads.py): its presence tests see a Cache too
    return False


def _library_names(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted library path it stands for, for the module's absolute imports from transformers (as
    :func:`cachemigrate.facts.library_imports.library_names` reads them on the CST)."""
    names = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "transformers":
            names.update((alias.asname or alias.name, f"{node.module}.{alias.name}") for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "transformers":
                    names[alias.asname or "transformers"] = alias.name if alias.asname else "transformers"
    return names


def _library_class(node: ast.expr, library: dict[str, str]) -> str:
    """The library's name of the class ``node`` stands for (``A`` of ``import GPT2Attention as A`` is
    ``GPT2Attention``), or "" where its first name is not imported from transformers."""
    root = _root(node)
    if root not in library:
        return ""
    return library[root].rsplit(".", 1)[-1] if isinstance(node, ast.Name) else _last(node)


def _root(node: ast.expr) -> str:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


def _last(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterable[str]:
    args = function.args
    for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
        if arg is not None:
            yield arg.arg


class _Parents:
    """Parent links for the nodes below one function's body."""

    def __init__(self, body: Sequence[ast.stmt]) -> None:
        self.of: dict[ast.AST, ast.AST] = {}
        stack = list(body)
        while stack:
            node = stack.pop()
            for child in ast.iter_child_nodes(node):
                self.of[child] = node
                stack.append(child)
        self.nodes = list(self.of) + list(body)


def _function_is_safe(function: ast.FunctionDef | ast.AsyncFunctionDef, cache_names: frozenset[str]) -> bool:
    parents = _Parents(function.body)
    names = {arg for arg in _parameters(function) if arg in cache_names}
    _add_aliases(parents.nodes, names)
    for node in parents.nodes:
        if isinstance(node, ast.Name):
            if node.id in names and not _safe_use(node, parents.of):
                return False
        elif _binds_other_identifier(node, names):
            return False  # `def past():`, `import x as past`, `except E as past`...: the analysis sees a use
    return True


def _add_aliases(nodes: Sequence[ast.AST], names: set[str]) -> None:
    """Every name an assignment binds from a cache variable joins ``names``, to a fixed point."""
    assigns = [node for node in nodes if isinstance(node, ast.Assign)]
    while True:
        before = len(names)
        for assign in assigns:
            if _mentions(assign.value, names):
                for target in assign.targets:
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        if len(names) == before:
            return


def _mentions(value: ast.expr, names: set[str]) -> bool:
    """``x``, ``a if c else x``, ``(a, x)``: the value forms through which the analysis follows an alias."""
    if isinstance(value, ast.Name):
        return value.id in names
    if isinstance(value, ast.IfExp):
        return _mentions(value.body, names) or _mentions(value.orelse, names)
    if isinstance(value, (ast.Tuple, ast.List)):
        return any(_mentions(element, names) for element in value.elts)
    return False


# Nodes whose identifier strings are not uses for the analysis either: the name a parameter binds, a keyword
# argument's name, an attribute's name (and a Name, judged on its own, or a literal's text).
_NOT_USES = (ast.Name, ast.arg, ast.keyword, ast.Attribute, ast.Constant)


def _binds_other_identifier(node: ast.AST, names: set[str]) -> bool:
    """Identifiers that ``ast`` keeps as strings and libcst as names that the analysis classifies as uses:
    ``def past():``, ``import x as past``, ``from past import x``, ``except E as past``, ``global past``, match
    captures..."""
    if isinstance(node, _NOT_USES):
        return False
    for field in node._fields:
        value = getattr(node, field, None)
        for text in value if isinstance(value, list) else (value,):
            if isinstance(text, str) and names.intersection(text.split(".")):
                return True
    return False


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _tests_a_cut(test: ast.expr, parent_of: dict) -> bool:
    """``test`` is (part of) the test of an ``if`` whose body cuts something to its last position (``x[:, -1:]``)."""
    node, parent = test, parent_of.get(test)
    while isinstance(parent, (ast.BoolOp, ast.UnaryOp)):
        node, parent = parent, parent_of.get(parent)
    if not (isinstance(parent, ast.If) and parent.test is node):
        return False
    return any(
        isinstance(n, ast.Subscript) and ast.unparse(n.slice).replace(" ", "").strip("()") == ":,-1:"
        for stmt in parent.body
        for n in ast.walk(stmt)
    )


def _safe_use(node: ast.Name, parent_of: dict) -> bool:
    parent = parent_of.get(node)
    if isinstance(node.ctx, ast.Store):
        return _is_binding_target(node, parent_of)
    if isinstance(node.ctx, ast.Del) or parent is None:
        return False
    if isinstance(parent, ast.Attribute):
        return parent.value is node  # x.attr: the Cache API
    if isinstance(parent, ast.Compare):
        if _tests_a_cut(parent, parent_of):
            return False  # CM111 rewrites the presence test of a branch that cuts inputs to their last position
        operands = [parent.left, *parent.comparators]
        return all(
            isinstance(op, _EQUALITY) and (_is_none(operands[i + 1]) or _is_none(parent.left))
            for i, op in enumerate(parent.ops)
        )
    if _is_truth_test(node, parent, parent_of):
        return True
    if isinstance(parent, ast.Call):
        return node in parent.args and not _consumes(parent)  # a positional argument (not `*x`, not the callee)
    if isinstance(parent, ast.keyword):
        call = parent_of.get(parent)
        return parent.arg is not None and isinstance(call, ast.Call) and not _consumes(call)  # k=x, not **x
    if isinstance(parent, ast.Return):
        return True
    if isinstance(parent, (ast.Tuple, ast.List, ast.Set)):
        return not isinstance(parent_of.get(parent), ast.Subscript)  # `(a, x)`, but not `y[a, x]`
    if isinstance(parent, ast.Dict):
        return any(key is node for key in parent.keys) or any(
            value is node and key is not None for key, value in zip(parent.keys, parent.values)
        )  # {k: x} and {x: v}, but not {**x}
    if isinstance(parent, ast.IfExp):
        return parent.test is not node
    if isinstance(parent, ast.Assign):
        return parent.value is node and all(isinstance(target, ast.Name) for target in parent.targets)
    return False


def _consumes(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Name) and call.func.id in CONSUMING_BUILTINS


def _is_truth_test(node: ast.AST, parent: ast.AST | None, parent_of: dict) -> bool:
    if isinstance(parent, (ast.If, ast.While, ast.IfExp)):
        return parent.test is node
    if isinstance(parent, ast.UnaryOp):
        return isinstance(parent.op, ast.Not)
    if isinstance(parent, ast.BoolOp):
        if parent.values[0] is node:
            return True
        return _is_truth_test(parent, parent_of.get(parent), parent_of)  # a later operand: if the whole is one
    return False


def _is_binding_target(node: ast.Name, parent_of: dict) -> bool:
    """A name bound by ``x = ...``, ``a, x = ...``, ``for x in ...``, ``for a, x in ...`` (comprehensions too);
    not ``x += ...``, ``x: T = ...``, ``(x := ...)``, ``*x``, ``with ... as x``."""
    child, holder = node, parent_of.get(node)
    while isinstance(holder, (ast.Tuple, ast.List)):
        child, holder = holder, parent_of.get(holder)
    if isinstance(holder, ast.Assign):
        return child in holder.targets
    if isinstance(holder, (ast.For, ast.AsyncFor, ast.comprehension)):
        return holder.target is child
    return False
