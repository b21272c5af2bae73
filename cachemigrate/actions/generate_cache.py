"""``generate_cache``: a model's own ``generate()`` (a 4.x copy of the library's steps that decodes with
``self._sample(...)`` itself) makes the Cache that the library's ``generate()`` makes, so the model is handed one from
the first step.

From 4.56 the library's ``generate()`` calls ``self._prepare_cache_for_generation(...)`` before decoding, which puts
a ``DynamicCache`` (an ``EncoderDecoderCache`` of two for an encoder-decoder model; a static cache when the
generation config asks for one) in ``model_kwargs``; 4.57's and 5.x's own musicgen ``generate()`` call it too. A 4.x
override never does: the migrated model is handed None, and keeps the legacy tuples it then gives back to the
override's loop. (For a config that is encoder-decoder the helper makes an EncoderDecoderCache, which a file's
model takes only where its layers handle one: the rules' templates test ``self.config.is_encoder_decoder``.) The
block (``template``) is inserted after the top-level statement of the method that matches
``anchor`` (a statement template, e.g. ``{mode} = generation_config.get_generation_mode()``: after the lengths are
prepared, before decoding), filled with the anchor's captures, under ``comment``. Only where every name of ``requires`` (``batch_size``,
``model_kwargs``...) is a parameter of the method or assigned by a top-level statement before the anchor, one
statement matches the anchor, and the method calls none of ``unless_calls`` (``self.<name>(...)``: CM446's
``_prepare_cache_for_generation``, where it makes the cache already) and has no statement matching ``unless``.

Instead of an anchor, ``before_calls`` names methods of ``self`` (``_sample``, ``_beam_search``): the block goes
before the first top-level statement that calls one of them (5.x's decoding loops read what the library's
``generate()`` puts in ``model_kwargs`` before it calls them, e.g. ``model_kwargs["use_cache"]``, CM452)."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from ..traverse import findall
from ..views.patterns import compile_statements, match_statements
from .base import Action, Planner
from .helpers import depth_of, filled_and_formatted


def _self_calls(names) -> m.Call:
    return m.Call(m.Attribute(m.Name("self"), m.OneOf(*[m.Name(n) for n in names])))


class GenerateCache(Action):
    name = "generate_cache"
    PARAMS = {
        "anchor": (str, False, "the statement template after which the block goes (one top-level statement)"),
        "before_calls": (
            list,
            False,
            "or: methods of self; the block goes before the first top-level statement calling one",
        ),
        "requires": (list, True, "names bound (parameters, or assigned at the top level) before the anchor"),
        "template": (str, True, "the statements inserted after the anchor, with the anchor's holes"),
        "comment": (str, False, "a comment line above the inserted statements"),
        "unless_calls": (list, False, "methods of self: a method calling one is left as it is"),
        "unless": (str, False, "a statement template: a method with a statement matching it is left as it is"),
    }

    @classmethod
    def check_params(cls, rule, check) -> None:
        if ("anchor" in rule.params) == ("before_calls" in rule.params):
            raise check.fail("params", "exactly one of `anchor` and `before_calls`")
        for key in ("anchor", "template", "unless"):
            if key not in rule.params:
                continue
            try:
                compile_statements(rule.params[key])
            except Exception as exc:  # noqa: BLE001 - any template error is the rule's
                raise check.fail(f"params.{key}", f"a valid statement template ({exc})") from None

    def planner(self) -> Planner:
        return _Planner(self)


def _anchors(action: GenerateCache, body: list, bound, own: set[str]) -> list[tuple[int, dict]]:
    """``(index after which the block goes, captures)`` of each place the rule names; ``own``: the methods the
    class defines itself (a loop of its own named as the library's is not the library's)."""
    if action.param("before_calls"):
        names = [name for name in action.param("before_calls") if name not in own]
        if not names:
            return []
        calls = _self_calls(names)
        first = next((i for i, stmt in enumerate(body) if findall(stmt, calls)), None)
        return [] if first is None else [(first - 1, {})]
    pattern = compile_statements(action.param("anchor"))
    found = []
    for index in range(len(body)):
        captures = match_statements(pattern, body, index, bound)
        if captures is not None:
            found.append((index, captures))
    return found


def _binds(stmt: cst.CSTNode) -> set[str]:
    found = findall(stmt, m.AssignTarget(m.Name()) | m.AnnAssign(target=m.Name()) | m.AugAssign(target=m.Name()))
    return {n.target.value for n in found}


class _Planner(Planner):
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if len(self.function_stack) != 1 or not self.in_function_scope() or self.current_class is None:
            return
        action: GenerateCache = self.action
        if action.param("unless_calls") and findall(node, _self_calls(action.param("unless_calls"))):
            return  # it does so already (this rule ran, or the file is newer)
        body = list(node.body.body)
        bound = self.bound()
        if action.param("unless"):
            unless = compile_statements(action.param("unless"))
            if any(
                match_statements(unless, [s], 0, bound) is not None for s in findall(node, m.SimpleStatementLine())
            ):
                return
        owner = next(n for n in reversed(self.stack) if isinstance(n, cst.ClassDef))
        own = {s.name.value for s in owner.body.body if isinstance(s, cst.FunctionDef)}
        found = _anchors(action, body, bound, own)
        if len(found) != 1:
            return
        index, captures = found[0]
        params = node.params
        known = {p.name.value for p in [*params.posonly_params, *params.params, *params.kwonly_params]}
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                known.add(star.name.value)
        for stmt in body[: index + 1]:
            known |= _binds(stmt)
        if not set(action.param("requires")) <= known:
            return
        values = {name: self.originals(value) for name, value in captures.items()}
        block = filled_and_formatted(self.ctx, action.param("template"), values, depth_of(self.current_function))
        if action.param("comment"):
            line = cst.EmptyLine(comment=cst.Comment(f"# {action.param('comment')}"))
            block[0] = block[0].with_changes(leading_lines=[line])
        action.changes += 1
        self.insert(node.body, index + 1, block)
