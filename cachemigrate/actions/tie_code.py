"""Reading the code of a tying method for :mod:`.tie_sources`: the ``tie_word_embeddings`` gate, the method's local
names (read as what they were assigned), names of ``__init__`` bound per a test, the sub-modules and weight ties that
``__init__`` builds, and where ``self`` is rebound."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..traverse import findall


def self_path(node: cst.BaseExpression) -> str | None:
    """``a.b`` for ``self.a.b``."""
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name) and node.value == "self" and parts:
        return ".".join(reversed(parts))
    return None


_CONFIG_FLAG = m.Attribute(m.Attribute(m.Name("self"), m.Name("config")), m.Name("tie_word_embeddings"))
_CONFIG_GETATTR = m.Call(
    m.Name("getattr"),
    args=[
        m.Arg(m.Attribute(m.Name("self"), m.Name("config"))),
        m.Arg(m.SimpleString(m.MatchIfTrue(lambda s: s[1:-1] == "tie_word_embeddings"))),
        m.ZeroOrMore(),
    ],
)


def is_gate(test: cst.BaseExpression) -> bool:
    """``self.config.tie_word_embeddings`` (or ``getattr(self.config, "tie_word_embeddings", ...)``)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):  # `x is not None and <gate>`
        return is_gate(test.left) or is_gate(test.right)
    return m.matches(test, _CONFIG_FLAG | _CONFIG_GETATTR)


def code_of(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _bound(target: cst.BaseExpression) -> list[str]:
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for element in target.elements for n in _bound(element.value)]
    return _bound(target.value) if isinstance(target, cst.StarredElement) else []


def method_locals(function: cst.FunctionDef) -> dict[str, cst.BaseExpression]:
    """The names ``function`` binds exactly once, by ``x = <expr>``, with what they are given."""
    counts: dict[str, int] = {}
    bindings = m.AssignTarget() | m.AugAssign() | m.AnnAssign() | m.For() | m.AsName() | m.NamedExpr()
    for node in findall(function.body, bindings):
        target = node.name if isinstance(node, cst.AsName) else node.target
        for name in _bound(target):
            counts[name] = counts.get(name, 0) + 1
    values = {a.targets[0].target.value: a.value for a in findall(function.body, m.Assign([m.AssignTarget(m.Name())]))}
    return {k: v for k, v in values.items() if counts.get(k) == 1 and k != "self"}


class _Substitute(cst.CSTTransformer):
    """Each local name read is replaced by what it was assigned (attribute names are not read names)."""

    def __init__(self, local: dict) -> None:
        super().__init__()
        self.local = local

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self.local.get(original.value, updated)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)


def substituted(node: cst.CSTNode, local: dict) -> cst.CSTNode:
    return node.visit(_Substitute(local)) if local else node


def branch_locals(init: cst.FunctionDef | None) -> dict[str, tuple[str, str]]:
    """Names bound to a ``self`` path in the body of a top-level ``if`` of ``__init__`` and to something else
    otherwise (``if config.share: a = b = self.shared`` / ``else: a = copy.deepcopy(self.shared)``): name ->
    (the path, the test)."""
    found: dict[str, tuple[str, str]] = {}
    for stmt in init.body.body if init is not None else ():
        if not isinstance(stmt, cst.If) or stmt.orelse is None:
            continue
        for assign in findall(stmt.body, m.Assign()):
            path = self_path(assign.value)
            for target in assign.targets if path else ():
                if isinstance(target.target, cst.Name):
                    found[target.target.value] = (path, code_of(stmt.test))
    return found


def built_calls(init: cst.FunctionDef | None) -> list[tuple[str, cst.Call]]:
    """``(x, the call)`` for each ``self.x = Class(...)`` of ``init``, in order; ``self.x = local`` where the method
    binds ``local = Class(...)`` once (``base = Model(config)``, then ``self.model = base``) is read as that call."""
    if init is None:
        return []
    local = {k: v for k, v in method_locals(init).items() if m.matches(v, m.Call(m.Name()))}
    found = []
    for assign in findall(init, m.Assign([m.AssignTarget(m.Attribute(m.Name("self"), m.Name()))])):
        value = assign.value
        if isinstance(value, cst.Name) and value.value in local:
            value = local[value.value]
        if m.matches(value, m.Call(m.Name())):
            found.append((assign.targets[0].target.attr.value, value))
    return found


def init_weight_assigns(init: cst.FunctionDef | None) -> list[tuple[str, str, str]]:
    """``(a.weight, b.weight, the code)`` for each ``self.a.weight = self.b.weight`` (or ``.bias``) among the
    top-level statements of ``__init__``: one Parameter from the module's construction, whatever the config says (the
    same statement in a tying method re-ties it). One under a test of ``__init__`` is not read."""
    found = []
    for stmt in init.body.body if init is not None else ():
        for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
            if not m.matches(small, m.Assign([m.AssignTarget()])):
                continue
            left, right = self_path(small.targets[0].target), self_path(small.value)
            if not left or not right or "." not in left or "." not in right:
                continue
            kind = left.rsplit(".", 1)[-1]
            if kind in ("weight", "bias") and right.rsplit(".", 1)[-1] == kind:
                found.append((left, right, code_of(small)))
    return found


def until_self_is_rebound(body) -> list:
    """The statements before the first that rebinds ``self`` (``self = getattr(self, self.base_model_prefix)``):
    after it, ``self.x`` is another module's."""
    kept = []
    for stmt in body:
        if findall(stmt, m.AssignTarget(m.Name("self"))):
            break
        kept.append(stmt)
    return kept


def without_reties(ties: list) -> list:
    """Drops a tie of a tying method (``_tie_weights``, under the gate or not) whose two parameters another tie
    already makes one, in either direction, whenever this one holds: a module handed to a sub-module as it is built
    (one Parameter whatever the config says), or, for a gated tie, the output embeddings' tie to the input
    embeddings (``self._tie_or_clone_weights(self.embed, self.head)`` after 4.x tied the head to ``embed``). It ties
    nothing new, and read as a tie of its own it would make a cycle or an ungated tie that 5.x cannot write."""
    kept = []
    for tie in ties:
        ends = {tie.target, tie.source}
        holds = ("built",) if tie.how == "ungated" else ("built", "embeddings")
        redundant = tie.how in ("gated", "ungated") and any(
            other.how in holds and {other.target, other.source} == ends for other in ties
        )
        if not redundant:
            kept.append(tie)
    return kept


def reads_only_config(test: str) -> bool:
    """``config.x`` / ``self.config.x`` tests (and their ``not``/``and``/``or``): the same in a model and in the
    sub-model it builds with its ``config``."""
    if not test:
        return False
    expression = cst.parse_expression(test)
    names = findall(expression, m.Name())
    configs = findall(expression, m.Attribute(m.Name("self"), m.Name("config")))
    return all(n.value in ("self", "config") for n in names if not is_attr_name(expression, n)) and sum(
        n.value == "self" for n in names
    ) == len(configs)


def is_attr_name(root: cst.CSTNode, name: cst.Name) -> bool:
    return any(a.attr is name for a in findall(root, m.Attribute()))


def module_attributes(init: cst.FunctionDef | None) -> set[str]:
    """The attributes ``init`` sets to a built module: ``self.x = C(...)`` with ``C`` a class name (``nn.Embedding``,
    ``Embedding``), or ``self.x = local`` where the method binds ``local`` once to such a call."""
    if init is None:
        return set()
    local = {k for k, v in method_locals(init).items() if _builds_module(v)}
    found = set()
    for assign in findall(init, m.Assign([m.AssignTarget(m.Attribute(m.Name("self"), m.Name()))])):
        value = assign.value
        if _builds_module(value) or (isinstance(value, cst.Name) and value.value in local):
            found.add(assign.targets[0].target.attr.value)
    return found


def _builds_module(value: cst.BaseExpression) -> bool:
    """``C(...)`` or ``x.C(...)`` with ``C`` capitalised: a class is built (not ``math.sqrt(...)``)."""
    if not isinstance(value, cst.Call):
        return False
    func = value.func
    last = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    return last[:1].isupper()


def param_path(node: cst.BaseExpression) -> tuple[str, str] | None:
    """``("embed_tokens", "")`` for ``embed_tokens``, ``("embed_tokens", "weight")`` for ``embed_tokens.weight``;
    ``embed_tokens if embed_tokens is not None else <a new module>`` keeps the parameter when it is given."""
    kept = m.IfExp(test=m.Comparison(m.Name(), [m.ComparisonTarget(m.IsNot(), m.Name("None"))]), body=m.Name())
    if m.matches(node, kept) and node.test.left.value == node.body.value:
        return node.body.value, ""
    if isinstance(node, cst.Name) and node.value != "self":
        return node.value, ""
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value != "self":
        return node.value.value, node.attr.value
    return None


def built_after_post_init(init: cst.FunctionDef | None, attribute: str) -> bool:
    """Whether ``init`` (an ``__init__``) sets ``self.<attribute>`` only in top-level statements after its
    ``self.post_init()`` (SeamlessM4T's heads build ``self.t2u_model`` after it): 5.x reads the ``{tied: source}``
    mapping in ``post_init``, when the attribute does not exist yet."""
    if init is None:
        return False
    body = list(init.body.body)
    post = m.SimpleStatementLine([m.Expr(m.Call(m.Attribute(m.Name("self"), m.Name("post_init")), args=[]))])
    calls = [i for i, stmt in enumerate(body) if m.matches(stmt, post)]
    target = m.AssignTarget(m.Attribute(m.Name("self"), m.Name(attribute)))
    sets = [i for i, stmt in enumerate(body) if findall(stmt, m.Assign([target]))]
    return bool(calls and sets) and min(sets) > calls[0]
