"""A tying method that builds ``self._tied_weights_keys`` as a list in a loop over indexed module lists, for
:mod:`.tie_weights_mapping`::

    if getattr(self.config, "tie_word_embeddings", True):
        self._tied_weights_keys = []
        for i in range(self.config.n_heads):
            self._tie_or_clone_weights(self.heads[i], self.words[i + 1])
            self._tied_weights_keys.append(f"heads.{i}.weight")

5.x reads ``_tied_weights_keys`` as the ``{tied: source}`` mapping (``post_init``, ``save_pretrained``), so the
mapping is built in ``__init__`` before ``self.post_init()``, over the same range::

    self._tied_weights_keys = {}
    for i in range(self.config.n_heads):
        self._tied_weights_keys[f"heads.{i}.weight"] = f"words.{i + 1}.weight"

and the method keeps its ties without the list. It is read only when every loop that fills the list ties one
indexed module of a list to one of another (``self._tie_or_clone_weights(a[i], b[...])`` or ``a[i].weight =
b[...].weight``, the lists read as paths through locals and ``self.get_*_embeddings()``), appends that tied
parameter, runs under the ``tie_word_embeddings`` gate (5.x ties a mapping only when it is true), over a range that
``__init__`` can compute (``self.config`` and constants), and every method that builds the list builds the same."""

from __future__ import annotations

import dataclasses

import libcst as cst
import libcst.matchers as m

from ..traverse import findall, parents
from .tie_code import code_of, is_gate, method_locals, substituted

_OWN = m.Attribute(m.Name("self"), m.Name("_tied_weights_keys"))
_NEW_LIST = m.SimpleStatementLine([m.Assign([m.AssignTarget(_OWN)], m.List([]))])
_APPEND = m.Call(m.Attribute(_OWN, m.Name("append")))
_TIE = m.Call(
    m.Attribute(m.Name("self"), m.Name("_tie_or_clone_weights")),
    args=[m.Arg(keyword=None), m.Arg(keyword=None)],
)
_WEIGHT = m.Attribute(m.Subscript(), m.Name("weight"))  # self.heads[i].weight = self.words[i + 1].weight


@dataclasses.dataclass
class LoopMapping:
    code: str  # the statements for `__init__` (one a line, unindented)
    removed: list  # the statement lines of the methods that build the list
    methods: list  # the names of those methods


def list_builders(cls: cst.ClassDef) -> list[tuple[cst.FunctionDef, cst.CSTNode]]:
    """The methods of ``cls`` that set ``self._tied_weights_keys = [...]`` (or append to it), with the first place."""
    pattern = m.Assign([m.AssignTarget(_OWN)], m.List()) | _APPEND
    found = []
    for stmt in cls.body.body:
        if isinstance(stmt, cst.FunctionDef):
            places = findall(stmt, pattern)
            if places:
                found.append((stmt, places[0]))
    return found


def _range_readable(iterator: cst.BaseExpression) -> bool:
    """``range(...)`` of constants, ``self.config.<x>`` and arithmetic: the same in ``__init__``."""
    if not m.matches(iterator, m.Call(m.Name("range"))):
        return False
    names = [n for n in findall(iterator, m.Name()) if not any(a.attr is n for a in findall(iterator, m.Attribute()))]
    configs = findall(iterator, m.Attribute(m.Name("self"), m.Name("config")))
    return all(n.value in ("range", "self") for n in names) and sum(n.value == "self" for n in names) == len(configs)


def _one_method(sources, cls_name: str, function: cst.FunctionDef) -> tuple[list[str], list, str | None]:
    """The ``__init__`` loops of one method, the statement lines to drop from it, or why it is not read so."""
    local = method_locals(function)
    up = parents(function)
    lines, removed = [], []
    for loop in findall(function, m.For(target=m.Name())):
        index = loop.target.value
        appends = findall(loop.body, _APPEND)
        calls = [[a.value for a in substituted(c, local).args] for c in findall(loop.body, _TIE)]
        assigned = [substituted(a, local) for a in findall(loop.body, m.Assign([m.AssignTarget(_WEIGHT)], _WEIGHT))]
        calls += [[a.targets[0].target.value, a.value.value] for a in assigned]
        if not appends and not calls:
            continue  # another loop of the method (`for module in self.modules():`)
        if len(appends) != 1 or len(calls) != 1 or findall(loop.body, m.For()) or loop.orelse is not None:
            return [], [], "its loop does not tie exactly one parameter and append it"
        if not m.matches(appends[0], m.Call(args=[m.Arg(m.FormattedString(), keyword=None)])):
            return [], [], "its loop appends something other than an f-string"
        ends = []
        for value in calls[0]:
            if not m.matches(value, m.Subscript(slice=[m.SubscriptElement(m.Index())])):
                return [], [], f"`{code_of(value)}` is not one module of an indexed list"
            path = sources.path_of(cls_name, value.value)
            if path is None:
                return [], [], f"`{code_of(value.value)}` is not read as a `self.<path>`"
            ends.append(f'f"{path}.{{{code_of(value.slice[0].slice.value)}}}.weight"')
        tied = code_of(appends[0].args[0].value)
        if tied != ends[0] or index not in tied:
            return [], [], f"its loop appends `{tied}` where it ties {ends[0]}"
        if not any(is_gate(s.test) and any(f is loop for f in findall(s.body, m.For())) for s in findall(function, m.If())):
            return [], [], (
                "its loop ties whatever `config.tie_word_embeddings` says, and 5.x ties a mapping only when it is true"
            )
        if not _range_readable(loop.iter):
            return [], [], f"`{code_of(loop.iter)}` reads more than `self.config` and constants, which `__init__` reads"
        lines.append(f"for {index} in {code_of(loop.iter)}:\n    self._tied_weights_keys[{tied}] = {ends[1]}\n")
        removed.append(up[up[appends[0]]])  # Call -> Expr -> SimpleStatementLine
    resets = findall(function, _NEW_LIST)
    every = findall(function, _OWN)
    if not lines or len(resets) != 1 or len(every) != len(resets) + len(removed):
        return [], [], "it reads or sets `self._tied_weights_keys` other than by one `= []` and the loops' appends"
    removed.append(resets[0])
    for line in removed:
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            return [], [], f"`{code_of(line).strip()}` shares its line with another statement"
        block = up[line]
        if len([s for s in block.body if any(s is r for r in removed)]) == len(block.body):
            return [], [], "dropping the list would leave a block empty"
    return lines, removed, None


def loop_mapping(sources, cls: cst.ClassDef) -> tuple[LoopMapping | None, str]:
    """The mapping that the class's tying methods build as a list in their loops, or why it is not read."""
    name = cls.name.value
    builders = list_builders(cls)
    init = next((s for s in cls.body.body if m.matches(s, m.FunctionDef(m.Name("__init__")))), None)
    if init is None:
        return None, f"`{name}` has no `__init__` of its own, where the mapping would be built"
    code, removed, methods = None, [], []
    for function, _place in builders:
        lines, dropped, why = _one_method(sources, name, function)
        if why is not None:
            return None, f"`{name}.{function.name.value}`: {why}"
        text = "self._tied_weights_keys = {}\n" + "".join(lines)
        if code is not None and text != code:
            return None, f"`{name}`'s methods {', '.join(f'`{n}`' for n in methods)} and `{function.name.value}` build different lists"  # fmt: skip
        code = text
        removed += dropped
        methods.append(function.name.value)
    loop_names = {line.split()[1] for line in code.splitlines() if line.startswith("for ")}
    if any(n.value in loop_names for n in findall(init, m.Name())):
        return None, f"`{name}.__init__` already uses the loop's name ({', '.join(sorted(loop_names))})"
    return LoopMapping(code, removed, methods), ""


def message_loop(code: str) -> str:
    """The mapping code, as one line per statement for a message: joined by ``"`, then `"``."""
    statements, pending = [], ""
    for line in code.splitlines():
        if line.startswith("for "):
            pending = line
        elif pending:
            statements.append(f"{pending} {line.strip()}")
            pending = ""
        else:
            statements.append(line)
    return "`, then `".join(statements)
