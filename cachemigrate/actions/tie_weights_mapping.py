"""``tie_weights_mapping``: ``_tied_weights_keys = ["lm_head.weight"]`` (a list of the tied parameters) becomes
the ``{tied parameter: its source}`` mapping that transformers 5.x requires (a list fails in ``post_init``), e.g.
``{"lm_head.weight": "transformer.wte.weight"}``. Iterating the mapping gives the parameters' names, which is all
that 4.x reads of it (as patterns searched in the full names), so the mapping works on every release from 4.50.

5.x ties exactly what the mappings of a model and of its sub-models name, when ``config.tie_word_embeddings`` is
true; 4.x tied what the code tied (``tie_weights``, the modules' ``_tie_weights``). The source of each entry is
read from that code (:mod:`.tie_sources`): an entry 4.x matched inside a sub-model (``encoder.embed_tokens.weight``
of a head whose base model is ``model``) is written with its full name, and each source is the parameter at the
end of the chain of ties. A tie built only under a test of the config (a module handed to a sub-model when the
config shares it) is written as 5.x writes it: the class's mapping holds the ties when the test is false, and
``__init__`` sets the mapping of the ties when it is true, under the same test, before ``self.post_init()`` (where
5.x reads it); ties under more than one test are refused. When the source of an entry cannot be proven the list
stays and the file is reported, naming the entry. A class whose tying methods build ``self._tied_weights_keys`` as a
list in a loop over indexed module lists gets the mapping built by the same loop in ``__init__``, before
``self.post_init()``, and the methods keep their ties without the list (:mod:`.tie_loops`); one whose loop is not read
so is refused: 5.x reads it as a mapping. A head whose 4.x ``tie_weights`` raised (its default
``get_input_embeddings`` has nothing to return: :mod:`.tie_default`) was never tied, and gets an empty mapping with a
comment saying so. (An override of ``tie_weights`` takes 5.x's keywords by CM427; its ties are read as those of
``_tie_weights``; one that cannot reach the output embeddings (:mod:`.tie_override`) leaves them untied at its level,
and the class gets no mapping of its sub-models' ties, which their own mappings hold.)"""

from __future__ import annotations

import textwrap

import libcst as cst
import libcst.matchers as m

from .base import Action, Planner
from .tie_loops import list_builders, loop_mapping, message_loop
from .tie_sources import TieSources, resolve_split


class TieWeightsMapping(Action):
    name = "tie_weights_mapping"
    PARAMS = {}

    def planner(self) -> Planner:
        return _Planner(self)

    def prepare(self, module: cst.Module) -> bool:
        self.sources = TieSources(module)
        return True


class _Planner(Planner):
    CLASS_LEVEL = True  # class bodies are edited: visited without a function in scope

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if self.function_stack or len(self.class_stack) != 1 or node.name.value not in self.ctx.classes:
            return
        builders = list_builders(node)
        if builders:
            self._loop_lists(node, builders)
            return
        target = m.SimpleStatementLine([m.Assign([m.AssignTarget(m.Name("_tied_weights_keys"))], m.List())])
        statement = next((s for s in node.body.body if m.matches(s, target)), None)
        action: TieWeightsMapping = self.action
        ties = action.sources.ties(node.name.value)
        if statement is None:
            self._unlisted(node, ties)
            return
        mapping: dict[str, str] = {}
        under: dict[str, str] = {}  # the mapping when the conditional ties' test holds
        tests: set[str] = set()
        for element in statement.body[0].value.elements:
            key = element.value.evaluated_value if isinstance(element.value, cst.SimpleString) else None
            off, on, seen, why = (
                resolve_split(ties, key) if isinstance(key, str) else ([], [], set(), "it is not a string")
            )
            if why is not None:
                self._refuse(node, element, key, why)
                return
            for tied, source in off:
                mapping.setdefault(tied, source)
            for tied, source in on:
                under.setdefault(tied, source)
            tests |= seen
        if tests and not self._conditional(node, statement.body[0].value, sorted(tests), under):
            return
        action.changes += 1
        value = cst.parse_expression(self._text(node, mapping))  # an empty list too: 5.x calls `.keys()` on it
        self.replace(statement.body[0], lambda updated, _r: updated.with_changes(value=value))

    def _loop_lists(self, node: cst.ClassDef, builders: list) -> None:
        """A tying method builds ``self._tied_weights_keys`` as a list in a loop (:mod:`.tie_loops`): the mapping is
        built in ``__init__`` before ``self.post_init()`` over the same range, and the methods keep their ties without
        the list; or the class is refused, naming the loop to write where it is read."""
        name = node.name.value
        method, written = builders[0][0].name.value, builders[0][1]
        found, why = loop_mapping(self.action.sources, node)
        init = next((s for s in node.body.body if m.matches(s, m.FunctionDef(m.Name("__init__")))), None)
        post = m.SimpleStatementLine([m.Expr(m.Call(m.Attribute(m.Name("self"), m.Name("post_init")), args=[]))])
        index = next((i for i, s in enumerate(init.body.body) if m.matches(s, post)), None) if init else None
        if found is not None and index is None:
            why = f"`{name}` has no `self.post_init()` in its `__init__`, before which the mapping would be built"
        if found is not None and self.action.sources.class_assigns(node, "_tied_weights_keys"):
            why = f"`{name}` also has a class attribute `_tied_weights_keys`"
        if found is None or why:
            loop = message_loop(found.code) if found is not None else ""
            what = (
                f"`{loop}`"
                if loop
                else "`self._tied_weights_keys = {}`, then `self._tied_weights_keys[<tied>] = <source>` for each "
                "parameter the method ties"
            )
            self.ctx.error(
                self.action.rule,
                None,
                f"`{name}.{method}` sets `self._tied_weights_keys` to a list (`{_code(written)}`), which transformers "
                "5.x reads as the `{tied parameter: source}` mapping (`save_pretrained`, `tie_weights()`): there it "
                f"raises AttributeError, and the mapping could not be built from the file ({why}); the file was left "
                f"unchanged. Build the mapping in `{name}.__init__` instead, before `self.post_init()`, which reads it "
                f"before it calls `tie_weights`: {what}; and drop the list and its `.append(...)` from `{method}`, "
                "keeping its ties",
                node=written,
            )
            return
        self.action.changes += 1
        statements = list(cst.parse_module(found.code).body)
        methods = " and ".join(f"`{n}`" for n in found.methods)
        text = f"# 5.x reads this mapping in post_init; {methods} built it as a list (added by cachemigrate)"
        body = init.body.indent if isinstance(init.body, cst.IndentedBlock) and init.body.indent else "    "
        unit = node.body.indent if isinstance(node.body, cst.IndentedBlock) and node.body.indent else "    "
        if len(unit) + len(body) + len(text) > self.ctx.line_length:
            text = "# 5.x reads this mapping in post_init; the tying methods built it as a list (added by cachemigrate)"
        comment = cst.EmptyLine(comment=cst.Comment(text))
        statements[0] = statements[0].with_changes(leading_lines=[comment])
        self.insert(init.body, index, statements)
        for line in found.removed:
            self.remove(line)

    def _conditional(self, node: cst.ClassDef, at: cst.CSTNode, tests: list[str], under: dict[str, str]) -> bool:
        """Some entries are tied only when a test of the config holds (a module handed to a sub-model under it): the
        class keeps the mapping of the ties when it does not, and ``__init__`` sets the mapping of the ties when it
        does, under the same test, before ``self.post_init()`` (where 5.x reads it). Or the class is refused."""
        init = next((s for s in node.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), None)
        post = m.SimpleStatementLine([m.Expr(m.Call(m.Attribute(m.Name("self"), m.Name("post_init")), args=[]))])
        index = next((i for i, s in enumerate(init.body.body) if m.matches(s, post)), None) if init else None
        why = None
        if len(tests) > 1:
            why = f"its ties depend on more than one test ({', '.join(f'`{t}`' for t in tests)})"
        elif index is None:
            why = (
                f"it is tied only when `{tests[0]}` is true, and `{node.name.value}` has no `__init__` of its own "
                "calling `self.post_init()`, before which the mapping that holds then would be set"
            )
        if why is not None:
            what = (
                f"`{node.name.value}._tied_weights_keys` is a list, which transformers 5.x rejects"
                if at is not node
                else f"`{node.name.value}` has no `_tied_weights_keys`, without which transformers 5.x ties nothing"
            )
            self.ctx.error(
                self.action.rule,
                None,
                f"{what}, and {why}; the "
                "file was left unchanged. Write the mapping by hand: the class's `_tied_weights_keys = {<tied>: "
                "<source>, ...}` of the ties that always hold, and in `__init__`, before `self.post_init()`, under each "
                "test, `self._tied_weights_keys = {...}` of the ties that hold then",
                node=at,
            )
            return False
        unit = node.body.indent if isinstance(node.body, cst.IndentedBlock) and node.body.indent else "    "
        body = init.body.indent if isinstance(init.body, cst.IndentedBlock) and init.body.indent else "    "
        prefix = len(unit) + len(body) + 4 + len("self._tied_weights_keys = ")
        text = self._text(node, under, prefix=prefix, indent="    ")
        text = text.replace("\n", "\n    ")  # the entries indented as the body of the `if`
        code = (
            f"if {tests[0]}:\n"
            "    # the ties that hold under this test, read by 5.x in post_init (added by cachemigrate)\n"
            f"    self._tied_weights_keys = {text}\n"
        )
        self.insert(init.body, index, [cst.parse_statement(code)])
        return True

    def _text(self, node: cst.ClassDef, mapping: dict[str, str], prefix: int = 0, indent: str = "") -> str:
        entries = [f'"{k}": "{v}"' for k, v in mapping.items()]
        indent = indent or (
            node.body.indent if isinstance(node.body, cst.IndentedBlock) and node.body.indent else "    "
        )
        prefix = prefix or len(indent) + len("_tied_weights_keys = ")
        text = "{" + ", ".join(entries) + "}"
        if prefix + len(text) > self.ctx.line_length:  # one entry a line
            text = "{\n" + "".join(f"{indent}{entry},\n" for entry in entries) + "}"  # indented as the class body
        return text

    def _unlisted(self, node: cst.ClassDef, ties) -> None:
        """A class without ``_tied_weights_keys`` (4.x tied without one) whose output embeddings 4.x tied, or that
        ties in its own ``_tie_weights`` under ``tie_word_embeddings``: 5.x ties only what a mapping names, so the
        mapping is added."""
        sources = self.action.sources
        if not sources.is_pretrained(node.name.value):  # 4.x ties the output embeddings of a PreTrainedModel
            return
        if any(sources.class_assigns(cls, "_tied_weights_keys") for cls in sources.mro(node.name.value)):
            return
        output = sources.output_embeddings(node.name.value)
        first: dict = {}  # the class's own tie of a parameter comes before those of its sub-models
        for tie in ties:
            first.setdefault(tie.target, tie)
        untied = {t for t, tie in first.items() if tie.how == "untied"}  # its `tie_weights` never ties them
        own = [
            t
            for t in ties
            if (t.how in ("embeddings", "unproven") and t.target == f"{output}.weight" and t.target not in untied)
            or (t.how == "gated" and t in sources.own_ties(node.name.value))
        ]
        # a module handed to a sub-module as it is built is one Parameter under two names: every runtime's
        # `save_pretrained` refuses such a group unless a mapping names all but one of them
        built = [t for t in sources.built_ties(node.name.value) if t.how in ("built", "conditional")]
        raising = [t for t in ties if t.how == "raises" and t.target == f"{output}.weight"]
        if raising and own:
            self._refuse(node, None, raising[0].target, raising[0].why, listed=False)
            return
        if raising:  # 4.x raised building the head where it would tie it: never tied, as 5.x builds it unmapped
            comment = (
                f"4.x never tied `{raising[0].target}`: where `tie_word_embeddings` is true its `tie_weights` failed "
                f"({raising[0].why}); 5.x builds it untied (added by cachemigrate)"
            )
            self.action.changes += 1
            self._add_mapping(node, {}, comment)
            return
        if not own and not built:
            return
        mapping: dict[str, str] = {}
        under: dict[str, str] = {}  # the mapping when the conditional ties' test holds
        tests: set[str] = set()
        for tie in own + [t for t in built if t.target not in {o.target for o in own}]:
            off, on, seen, why = resolve_split(ties, tie.target)
            if why is not None:
                self._refuse(node, None, tie.target, why, listed=False)
                return
            for tied, source in off:
                mapping.setdefault(tied, source)
            for tied, source in on:
                under.setdefault(tied, source)
            tests |= seen
        if tests and not self._conditional(node, node, sorted(tests), under):
            return
        self.action.changes += 1
        self._add_mapping(node, mapping)

    def _add_mapping(self, node: cst.ClassDef, mapping: dict[str, str], comment: str = "") -> None:
        """The class attribute ``_tied_weights_keys = {...}``, first in the class body (after its docstring), with
        ``comment`` above it wrapped to the line length."""
        statement = cst.parse_statement(f"_tied_weights_keys = {self._text(node, mapping)}\n")
        indent = node.body.indent if isinstance(node.body, cst.IndentedBlock) and node.body.indent else "    "
        width = max(self.ctx.line_length - len(indent) - 2, 40)
        lines = [cst.EmptyLine(comment=cst.Comment(f"# {line}")) for line in textwrap.wrap(comment, width)]
        body = list(node.body.body)
        first = 1 if body and m.matches(body[0], m.SimpleStatementLine([m.Expr(m.SimpleString())])) else 0
        if first:  # after the docstring, a blank line
            lines.insert(0, cst.EmptyLine(indent=False))
        statement = statement.with_changes(leading_lines=lines)
        following = body[first] if first < len(body) else None
        if isinstance(following, (cst.FunctionDef, cst.ClassDef)) and not following.leading_lines:
            # a blank line between the attribute and the method after it, as black writes it
            self.replace(
                following, lambda updated, _r: updated.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
            )
        self.insert(node.body, first, [statement])

    def _refuse(self, node: cst.ClassDef, element, key, why: str, listed: bool = True) -> None:
        name = node.name.value
        shown = f"`{key}`" if isinstance(key, str) else f"`{cst.Module([]).code_for_node(element.value)}`"
        hint = key if isinstance(key, str) else "<parameter>"
        what = (
            f"`{name}._tied_weights_keys` is a list, which transformers 5.x rejects, and the parameter that its "
            f"entry {shown} is tied to"
            if listed
            else f"`{name}` has no `_tied_weights_keys`, without which transformers 5.x ties nothing, and the "
            f"parameter that 4.x tied {shown} to"
        )
        self.ctx.error(
            self.action.rule,
            None,
            f"{what} could not be proven from the file ({why}; read: `get_output_embeddings` / "
            "`get_input_embeddings` through `base_model_prefix`, `self._tie_or_clone_weights(...)` in "
            "`_tie_weights` under `if self.config.tie_word_embeddings:`, `self.<x>.bias = self.bias`); the file was "
            f'left unchanged. Write the mapping by hand: `_tied_weights_keys = {{"{hint}": "<the parameter it is '
            'tied to>", ...}` (5.x ties each entry when `config.tie_word_embeddings` is true)',
            node=element if element is not None else node,
        )


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)
