"""``tie_weights_mapping``: ``_tied_weights_keys = ["lm_head.weight"]`` (a list of the tied parameters) becomes
the ``{tied parameter: its source}`` mapping that transformers 5.x requires (a list fails in ``post_init``), e.g.
``{"lm_head.weight": "transformer.wte.weight"}``. Iterating the mapping gives the list's names, which is all that
4.x reads of it, so the mapping works on every release from 4.50.

The source is found in the file: the head's ``self.<prefix> = <Model>(...)``, where ``prefix`` is the
``base_model_prefix`` of its pretrained class, and ``<Model>.get_input_embeddings`` returning ``self.<path>``; an
entry is mapped only when it names the head's output embeddings (what its ``get_output_embeddings`` returns,
``.weight``). When any of this cannot be found the list stays and the file is reported."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..views.patterns import code_of
from .base import Action, Planner


class TieWeightsMapping(Action):
    name = "tie_weights_mapping"
    PARAMS = {}

    def planner(self) -> Planner:
        return _Planner(self)

    def plan(self, module: cst.Module) -> list:
        self.classes = {s.name.value: s for s in module.body if isinstance(s, cst.ClassDef)}
        return super().plan(module)


def _class_string(cls: cst.ClassDef | None, name: str) -> str | None:
    """The string value of a class attribute ``name = "..."``."""
    for stmt in cls.body.body if cls is not None else ():
        if m.matches(stmt, m.SimpleStatementLine([m.Assign([m.AssignTarget(m.Name(name))], m.SimpleString())])):
            return stmt.body[0].value.evaluated_value
    return None


def _returned_self_path(cls: cst.ClassDef | None, method: str) -> str | None:
    """``wte`` / ``decoder.embed_tokens`` when ``method`` of ``cls`` is ``return self.<path>``."""
    for stmt in cls.body.body if cls is not None else ():
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == method:
            returns = m.findall(stmt, m.Return(m.Attribute()))
            if len(returns) == 1:
                path = code_of(returns[0].value)
                if path.startswith("self."):
                    return path[len("self.") :]
    return None


class _Planner(Planner):
    CLASS_LEVEL = True  # class bodies are edited: visited without a function in scope

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if self.function_stack or len(self.class_stack) != 1 or node.name.value not in self.ctx.classes:
            return
        target = m.SimpleStatementLine([m.Assign([m.AssignTarget(m.Name("_tied_weights_keys"))], m.List())])
        statement = next((s for s in node.body.body if m.matches(s, target)), None)
        if statement is None:
            return
        action: TieWeightsMapping = self.action
        entries = statement.body[0].value.elements
        mapping = self._mapping(node, entries)
        if mapping is None:
            self.ctx.error(
                action.rule,
                f"{node.name.value}.__init__" if f"{node.name.value}.__init__" in self.ctx.info.functions else None,
                f"`{node.name.value}._tied_weights_keys` is a list, which transformers 5.x rejects, and the "
                "parameters it ties to could not be found in the file (the head's base model attribute named by "
                "`base_model_prefix`, and `get_input_embeddings` of that model returning `self.<embedding>`); the "
                "file was left unchanged. Write the mapping by hand: "
                '`_tied_weights_keys = {"lm_head.weight": "<prefix>.<embedding>.weight"}`',
            )
            return
        action.changes += 1
        value = cst.parse_expression("{" + ", ".join(f"{k!r}: {v!r}".replace("'", '"') for k, v in mapping) + "}")
        self.replace(statement.body[0], lambda updated, _r: updated.with_changes(value=value))

    def _mapping(self, node: cst.ClassDef, entries) -> list[tuple[str, str]] | None:
        classes = self.action.classes
        output = _returned_self_path(node, "get_output_embeddings")
        pretrained = next((classes.get(code_of(b.value)) for b in node.bases if code_of(b.value) in classes), None)
        prefix = _class_string(pretrained, "base_model_prefix")
        if not output or not prefix or not entries:
            return None
        init = next((s for s in node.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), None)
        built = None
        assign = m.Assign([m.AssignTarget(m.Attribute(m.Name("self"), m.Name(prefix)))], m.Call(m.Name()))
        for found in m.findall(init, assign) if init is not None else ():
            built = found.value.func.value
        embedding = _returned_self_path(classes.get(built), "get_input_embeddings") if built else None
        if embedding is None:
            return None
        mapping = []
        for element in entries:
            name = element.value.evaluated_value if isinstance(element.value, cst.SimpleString) else None
            if name != f"{output}.weight":
                return None
            mapping.append((name, f"{prefix}.{embedding}.weight"))
        return mapping
