"""Tensor ranks inferred along a function's own code, so that ``dim=2`` can be told apart from ``dim=-1``.

A rank is known when the code says it: ``x.view(b, s, h, d)`` (4), ``x.permute(0, 2, 1, 3)`` (4),
``x.unsqueeze(1)`` (one more), ``x.view(*shape)`` of a local tuple ``shape`` (its length), each of the tensors
``parts[0]`` of ``parts = x.chunk(n, dim)`` (or ``split``: the rank of ``x``), ``torch.stack`` (one more), an einops pattern (``rearrange(x, "b s (h d) -> b h s d")``:
4, the axes right of the arrow) or an einsum's (``"bhqd,bhkd->bhqk"``), a method of the same class or a function of the same
module whose return has a known rank (``self._split_heads(x)``, ``self._shape(x, s, b)``), and whatever keeps
the rank of its input (``transpose``, ``contiguous``, ``to``, slicing, arithmetic). Arithmetic takes the largest
known rank of its operands, and ``q, k = f(q, k, ...)`` with ``f`` unknown keeps the ranks ``q`` and ``k`` had:
both assume that broadcasting does not add axes, which the probe checks on the corpus. Anything else is unknown,
and an unknown rank never normalises a dimension.
"""

from __future__ import annotations

from typing import Callable, Mapping

import libcst as cst
import libcst.matchers as m

from .names import dotted as _dotted

KEEPS_RANK = frozenset(
    {
        "transpose",
        "contiguous",
        "to",
        "float",
        "half",
        "bfloat16",
        "double",
        "type",
        "type_as",
        "clone",
        "detach",
        "masked_fill",
        "softmax",
        "mul",
        "add",
        "div",
        "sub",
        "neg",
        "abs",
        "exp",
        "sqrt",
        "rsqrt",
        "expand_as",
        "repeat_interleave",
        "roll",
        "flip",
        "narrow",
        "cumsum",
        "tril",
        "triu",
    }
)
SETS_RANK = frozenset({"view", "reshape", "expand", "repeat", "permute", "new_zeros", "new_ones", "new_empty"})
TORCH_KEEPS = frozenset({"dropout", "softmax", "tanh", "relu", "gelu", "sigmoid", "where"})

EINOPS = frozenset({"rearrange", "repeat", "einops.rearrange", "einops.repeat"})

Lookup = Callable[[str, int], "int | None"]  # (callable name, which returned element) -> rank


def int_literal(node: cst.BaseExpression) -> int | None:
    if isinstance(node, cst.Integer):
        return int(node.value)
    if (
        isinstance(node, cst.UnaryOperation)
        and isinstance(node.operator, cst.Minus)
        and isinstance(node.expression, cst.Integer)
    ):
        return -int(node.expression.value)
    return None


def _string(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def einops_rank(node: cst.Call) -> int | None:
    """The rank an einops ``rearrange``/``repeat`` call gives: the number of axes (a parenthesised group is one)
    on the right of its pattern, ``"b s (h d) -> b h s d"`` (4); None for an ellipsis or a pattern that is not
    a literal."""
    args = [a for a in node.args if a.keyword is None]
    pattern = _string(args[1].value) if len(args) > 1 else None
    if pattern is None or pattern.count("->") != 1 or "..." in pattern:
        return None
    right = pattern.split("->")[1]
    depth, count = 0, 0
    for token in right.replace("(", " ( ").replace(")", " ) ").split():
        if token == "(":
            depth += 1
            count += depth == 1
        elif token == ")":
            depth -= 1
        elif depth == 0:
            count += 1
    return count if depth == 0 else None


def _einsum_rank(node: cst.BaseExpression) -> int | None:
    """``torch.einsum("bhqd,bhkd->bhqk", ...)``: the letters on the right of the arrow (4)."""
    spec = _string(node)
    if spec is None or spec.count("->") != 1 or "..." in spec:
        return None
    return len(spec.split("->")[1].replace(" ", ""))


class RankScope:
    """Ranks of the local names of one function, filled statement by statement in code order."""

    def __init__(self, known: Mapping[str, int] | None = None, lookup: Lookup | None = None) -> None:
        self.ranks: dict[str, int] = dict(known or {})
        self.lookup = lookup or (lambda name, index: None)
        self.lengths: dict[str, int] = {}  # locals bound to a tuple of known length (`shape = (b, h, -1, d)`)
        self.elements: dict[str, int] = {}  # locals bound to the tensors of a `chunk` / `split`: their rank

    # -- expressions -----------------------------------------------------------------------------------------

    def rank(self, node: cst.BaseExpression) -> int | None:
        if isinstance(node, cst.Name):
            return self.ranks.get(node.value)
        if isinstance(node, cst.Subscript):
            return self._subscript(node)
        if isinstance(node, cst.BinaryOperation):
            known = [r for r in (self.rank(node.left), self.rank(node.right)) if r is not None]
            return max(known) if known else None
        if isinstance(node, cst.UnaryOperation):
            return self.rank(node.expression)
        if isinstance(node, cst.Call):
            return self._call(node)
        return None

    def _subscript(self, node: cst.Subscript) -> int | None:
        if isinstance(node.value, cst.Name) and node.value.value in self.elements:  # `parts[0]` of a chunk
            index = node.slice[0].slice if len(node.slice) == 1 else None
            if isinstance(index, cst.Index) and int_literal(index.value) is not None:
                return self.elements[node.value.value]
            return None
        base = self.rank(node.value)
        if base is None:
            return None
        dropped = 0
        added = 0
        for element in node.slice:
            index = element.slice
            if isinstance(index, cst.Index):
                if m.matches(index.value, m.Name("None")):
                    added += 1
                elif m.matches(index.value, m.Ellipsis()):
                    continue
                elif int_literal(index.value) is not None:
                    dropped += 1
                else:
                    return None  # tensor indexing: the rank depends on the index
        return base - dropped + added

    def _call(self, node: cst.Call) -> int | None:
        func = node.func
        if _dotted(func) in EINOPS:
            return einops_rank(node)
        args = [a for a in node.args if a.keyword is None]
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            receiver = func.value
            if _dotted(receiver) == "torch":
                return self._torch(method, node)
            if method in SETS_RANK:
                if len(args) == 1 and args[0].star == "*" and isinstance(args[0].value, cst.Name):
                    return self.lengths.get(args[0].value.value)  # `x.view(*shape)`
                if any(a.star for a in args) or not args:
                    return None
                if len(args) == 1:
                    single = args[0].value
                    return len(single.elements) if isinstance(single, (cst.Tuple, cst.List)) else None
                return len(args)
            if method in KEEPS_RANK:
                return self.rank(receiver)
            if method == "unsqueeze":
                base = self.rank(receiver)
                return base + 1 if base is not None else None
            if method == "squeeze":
                base = self.rank(receiver)
                return base - 1 if base is not None and args else None
            if method == "flatten":
                base = self.rank(receiver)
                start = int_literal(args[0].value) if args else 0
                end = int_literal(args[1].value) if len(args) > 1 else -1
                if base is None or start is None or end is None:
                    return None
                start, end = start % base, end % base
                return base - (end - start)
            dotted = _dotted(func)
            if dotted and dotted.startswith("self."):
                return self.lookup(dotted, 0)
            return None
        dotted = _dotted(func)
        if dotted:
            return self.lookup(dotted, 0)
        return None

    def _torch(self, function: str, node: cst.Call) -> int | None:
        args = [a for a in node.args if a.keyword is None]
        if function in ("cat", "concat", "concatenate") and args and isinstance(args[0].value, (cst.Tuple, cst.List)):
            known = [self.rank(e.value) for e in args[0].value.elements]
            known = [r for r in known if r is not None]
            return known[0] if known and len(set(known)) == 1 else None
        if function == "stack" and args and isinstance(args[0].value, (cst.Tuple, cst.List)):
            known = [r for r in (self.rank(e.value) for e in args[0].value.elements) if r is not None]
            return known[0] + 1 if known and len(set(known)) == 1 else None
        if function in ("matmul", "bmm", "baddbmm"):
            known = [r for r in (self.rank(a.value) for a in args) if r is not None]
            return max(known) if known else None
        if function == "einsum" and args:
            return _einsum_rank(args[0].value)
        if function in TORCH_KEEPS and args:
            return self.rank(args[0].value)
        return None

    def returned(self, node: cst.BaseExpression) -> list[int | None]:
        """Ranks of each element of a returned expression (a tuple gives several)."""
        if isinstance(node, cst.Tuple):
            return [self.rank(e.value) for e in node.elements]
        return [self.rank(node)]

    # -- statements ------------------------------------------------------------------------------------------

    def assign(self, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
        if isinstance(target, cst.Name):
            self._set(target.value, self.rank(value))
            self.lengths.pop(target.value, None)
            self.elements.pop(target.value, None)
            if isinstance(value, cst.Tuple) and not any(isinstance(e, cst.StarredElement) for e in value.elements):
                self.lengths[target.value] = len(value.elements)
            method = value.func.attr.value if m.matches(value, m.Call(func=m.Attribute())) else None
            if method in ("split", "chunk", "tensor_split") and self.rank(value.func.value) is not None:
                self.elements[target.value] = self.rank(value.func.value)
            return
        if not isinstance(target, (cst.Tuple, cst.List)):
            return
        names = [e.value.value if isinstance(e.value, cst.Name) else None for e in target.elements]
        if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(names):
            ranks = [self.rank(e.value) for e in value.elements]
        elif (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Attribute)
            and value.func.attr.value
            in (
                "split",
                "chunk",
                "tensor_split",
            )
        ):
            ranks = [self.rank(value.func.value)] * len(names)
        elif (
            isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "unbind"
        ):
            base = self.rank(value.func.value)
            ranks = [base - 1 if base is not None else None] * len(names)
        elif isinstance(value, cst.Call) and _dotted(value.func):
            ranks = [self.lookup(_dotted(value.func), i) for i in range(len(names))]
            # `q, k = f(q, k, ...)`: what f returns for q and k keeps their ranks, unless f says otherwise
            passed = [a.value.value if isinstance(a.value, cst.Name) else None for a in value.args]
            ranks = [
                rank if rank is not None else (self.ranks.get(name) if name in passed else None)
                for rank, name in zip(ranks, names)
            ]
        else:
            base = self.rank(value)  # unpacking a tensor iterates over its first axis
            ranks = [base - 1 if base is not None and base > 1 else None] * len(names)
        for name, rank in zip(names, ranks):
            if name is not None:
                self._set(name, rank)

    def _set(self, name: str, rank: int | None) -> None:
        if rank is None:
            self.ranks.pop(name, None)
        else:
            self.ranks[name] = rank

    def statement(self, stmt: cst.CSTNode) -> None:
        """Update the ranks for one small statement (assignments; everything else leaves them)."""
        if isinstance(stmt, cst.Assign):
            for target in stmt.targets:
                self.assign(target.target, stmt.value)
        elif isinstance(stmt, cst.AnnAssign) and stmt.value is not None:
            self.assign(stmt.target, stmt.value)
        elif isinstance(stmt, cst.AugAssign) and isinstance(stmt.target, cst.Name):
            known = [r for r in (self.ranks.get(stmt.target.value), self.rank(stmt.value)) if r is not None]
            self._set(stmt.target.value, max(known) if known else None)


class RankOracle:
    """Ranks of what the module's own functions and methods return, so that ``self._split_heads(x)`` or
    ``rotate_half(x)`` has a rank where the callee's code says so. Computed on demand, once per callee."""

    def __init__(self, functions: Mapping[str, cst.FunctionDef], bases: Mapping[str, list[str]]) -> None:
        self.functions = functions  # qualified name ("Class.method" or "function") -> node
        self.bases = bases  # class -> base classes defined in the module
        self._returns: dict[str, list[int | None]] = {}

    def lookup(self, cls: str | None) -> Lookup:
        def find(name: str, index: int) -> int | None:
            qualname = self._resolve(name, cls)
            if qualname is None:
                return None
            ranks = self._returned(qualname)
            if len(ranks) == 1:
                return ranks[0]
            return ranks[index] if index < len(ranks) else None

        return find

    def _resolve(self, name: str, cls: str | None) -> str | None:
        if name.startswith("self."):
            method = name[len("self.") :]
            if "." in method or cls is None:
                return None
            todo, seen = [cls], set()
            while todo:
                current = todo.pop(0)
                if f"{current}.{method}" in self.functions:
                    return f"{current}.{method}"
                seen.add(current)
                todo.extend(b for b in self.bases.get(current, []) if b not in seen)
            return None
        return name if name in self.functions else None

    def _returned(self, qualname: str) -> list[int | None]:
        if qualname in self._returns:
            return self._returns[qualname]
        self._returns[qualname] = [None]  # a recursive callee is unknown
        node = self.functions[qualname]
        cls = qualname.split(".")[0] if "." in qualname else None
        scope = RankScope(lookup=self.lookup(cls))
        found: list[list[int | None]] = []
        for stmt in iter_small_statements(node.body):
            if isinstance(stmt, cst.Return) and stmt.value is not None:
                found.append(scope.returned(stmt.value))
            else:
                scope.statement(stmt)
        result = found[0] if found and all(f == found[0] for f in found) else [None]
        self._returns[qualname] = result
        return result


def iter_small_statements(block: cst.BaseSuite):
    """The small statements of a block in code order, nested blocks included (functions and classes not)."""
    body = block.body if isinstance(block, cst.IndentedBlock) else [block]
    for stmt in body:
        if isinstance(stmt, cst.SimpleStatementLine):
            yield from stmt.body
        elif isinstance(stmt, cst.SimpleStatementSuite):
            yield from stmt.body
        elif isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            continue
        elif isinstance(stmt, cst.BaseCompoundStatement):
            for child in _blocks(stmt):
                yield from iter_small_statements(child)


def _blocks(stmt: cst.BaseCompoundStatement):
    yield stmt.body
    orelse = getattr(stmt, "orelse", None)
    if isinstance(orelse, cst.If):
        yield from _blocks(orelse)
    elif orelse is not None:
        yield orelse.body
    for handler in getattr(stmt, "handlers", ()):
        yield handler.body
    final = getattr(stmt, "finalbody", None)
    if final is not None:
        yield final.body
