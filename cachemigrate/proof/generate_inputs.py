"""Inputs that transformers 5.x's ``generate()`` keeps between steps, updated in place by the migrated file.

5.x's generation loop keeps the ``position_ids`` (and ``token_type_ids``, the attention mask...) it hands the model in
its ``model_kwargs`` and extends them from their last value at each step (``_update_model_kwargs_for_generation``);
4.x built them anew from the attention mask at every step. A forward that updates such an input in place
(``position_ids += self.offset``, ``position_ids.add_(2)``) therefore shifts generate's own copy too, and the
positions drift by that much at every step: the logits of one call are right, the generated tokens are not. The
original file does the same on that runtime (it cannot run there at all), so this is a note, not a refusal: it
names the statement and the out-of-place spelling that keeps the caller's tensor. ``position_ids += x`` in a
``forward`` is rewritten out of place by rule CM423 (era 5, so portable too) and gets no note; what no rule
rewrites (``.add_(...)``, the other inputs) is noted.

Only :mod:`ast`: this runs in the command line's process, after the engine, for the eras whose runtime is 5.x.
"""

from __future__ import annotations

import ast

from .. import diagnostics as codes
from ..diagnostics import Diagnostic
from .companions import releases

# the forward inputs 5.x's generate() keeps in its model_kwargs and extends at each step
KEPT = frozenset(
    {"position_ids", "decoder_position_ids", "token_type_ids", "attention_mask", "decoder_attention_mask"}
)
_OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.BitAnd: "&",
              ast.BitOr: "|", ast.Mod: "%"}  # fmt: skip


def _in_place(node: ast.AST, names: set[str]) -> str | None:
    """The input ``node`` updates in place (``x += ...``, ``x.add_(...)``), if it is one of ``names``."""
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id in names:
        return node.target.id
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
        method = node.func.attr
        if node.func.value.id in names and method.endswith("_") and not method.startswith("_"):
            return node.func.value.id
    return None


def _fix(node: ast.AST, name: str) -> str:
    if isinstance(node, ast.AugAssign) and type(node.op) in _OPERATORS:
        return f"`{name} = {name} {_OPERATORS[type(node.op)]} {ast.unparse(node.value)}`"
    if isinstance(node, ast.Call):
        return f"`{name} = {name}.{node.func.attr[:-1]}({', '.join(map(ast.unparse, node.args))})` (out of place)"
    return f"an out-of-place update bound to `{name}`"


def in_place_input_notes(path: str, code: str, runtime: str) -> list[Diagnostic]:
    """A CM914 note at each statement of ``code`` that updates in place a generate-kept input it was handed (a
    parameter of its function not rebound before that line)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    notes = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        args = function.args
        inputs = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)} & KEPT
        if not inputs:
            continue
        rebound = {}
        for node in ast.walk(function):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Name) and target.id in inputs:
                        rebound[target.id] = min(rebound.get(target.id, node.lineno), node.lineno)
        for node in ast.walk(function):
            name = _in_place(node, inputs)
            if name is None or rebound.get(name, node.lineno + 1) <= node.lineno:
                continue
            notes.append(
                Diagnostic(
                    path,
                    node.lineno,
                    node.col_offset + 1,
                    codes.IN_PLACE_INPUT,
                    f"`{ast.unparse(node)}` updates in place the `{name}` handed to `{function.name}`: on transformers "
                    f"{releases(runtime)}, generate() keeps the `{name}` it hands the model and extends them at each step, so this shifts its copy too and the generated tokens "
                    f"drift from the second step on (one call's logits stay right); write {_fix(node, name)}",
                )
            )
    return notes
