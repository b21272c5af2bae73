"""The first generation step: a test in ``prepare_inputs_for_generation`` that tells it by the absence of a past.

A tuple model gets ``past_key_values=None`` from ``generate()`` on the first step. A migrated model (it claims
Cache support) gets an EMPTY Cache there instead, so ``past_key_values is not None`` (or ``if past_key_values:``
for a cache that has no length, such as a StaticCache), left as it was, takes the first step for a later one:
the prompt is cut to its last token, ``inputs_embeds`` or image inputs are dropped, and the output changes without
any error. Rules rewrite such tests to ask a Cache whether it holds a token (CM103, CM104); this audit refuses a
migration that leaves one of them, as the user wrote it, unguarded in any generation hook of the migrated file,
edited or not (a statement a rule wrote is that rule's, tested by its fixtures).
"""

from __future__ import annotations

import re

import libcst as cst
import libcst.matchers as m

from .. import diagnostics as codes
from ..facts.analysis import Locator, ModuleInfo, analyze
from ..facts.past_hook import GENERATION_HOOKS, past_hooks
from ..diagnostics import Diagnostic
from ..excerpts import source_line
from ..rules.schema import Era
from ..traverse import findall, nodes

# a `check` use that is a type test, not a test of presence (`isinstance(past, Cache)`, `hasattr(past, ...)`)
_TYPE_TEST = re.compile(r"^(isinstance|type|hasattr|getattr|id)\(")


def _presence_tests(info: ModuleInfo, heads: frozenset = frozenset()) -> list:
    """The unguarded tests of a cache's presence (``x is None``, ``x is not None``, a truth test) in the hooks, in
    the forwards of ``heads`` (heads over a library model, which generate() hands an empty Cache too), and in a
    ``forward`` where such a test cuts the inputs to their last position (4.6's T5 and BART heads cut
    ``decoder_input_ids`` in ``forward`` itself when handed a past: the older spelling of the hook's cut)."""
    return [
        use
        for fn in info.functions.values()
        if fn.name in GENERATION_HOOKS or fn.name == "forward"
        for use in fn.uses
        if use.kind == "check"
        and not _TYPE_TEST.match(use.idiom)
        and (fn.name in GENERATION_HOOKS or fn.cls in heads or _cuts_to_last(fn.node, use.node))
    ]


def _cuts_to_last(function: cst.FunctionDef, test: cst.CSTNode | None) -> bool:
    """``test`` is in the test of an ``if`` whose body cuts something to its last position (``x[:, -1:]``)."""
    last = m.Slice(lower=m.UnaryOperation(operator=m.Minus(), expression=m.Integer("1")), upper=None)
    for branch in findall(function, m.If()):
        if test is not None and any(node is test for node in nodes(branch.test)):
            return bool(findall(branch.body, m.SubscriptElement(slice=last)))
    return False


def first_step_diagnostics(
    before: ModuleInfo, new_module: cst.Module, era: Era, path: str, locate: Locator
) -> list[Diagnostic]:
    """One diagnostic per statement of a generation hook of ``new_module`` that still tells the first step by
    the absence of a past, located in the original file."""
    heads = frozenset(before.roles.get("library_head", ()))
    hooks = [  # the classes that define a hook (or heads over a library model), and the hooks defined at the top
        stmt
        for stmt in new_module.body
        if isinstance(stmt, cst.ClassDef)
        and (
            stmt.name.value in heads
            or any(isinstance(s, cst.FunctionDef) and s.name.value in GENERATION_HOOKS for s in stmt.body.body)
        )
        or isinstance(stmt, cst.FunctionDef)
        and stmt.name.value in GENERATION_HOOKS
    ]
    if not hooks:
        return []
    after = analyze(new_module.with_changes(body=hooks), era.cache_names)  # new_module: a fresh parse
    originals: dict[tuple, list] = {}
    for use in _presence_tests(before, heads):
        originals.setdefault((use.function, use.statement), []).append(use)
    seen: set[tuple] = set()
    result = []
    for use in _presence_tests(after, heads):
        key = (use.function, use.statement)
        if key in seen:
            continue
        seen.add(key)
        matches = originals.get(key)
        if not matches:
            # a statement a rule wrote (era 5's `if cache is not None and past is None: past = cache` adopts the
            # cache handed as `cache=`): the rule's own test, proven by its fixtures, not a test the user left
            continue
        line, column = locate(matches[0].node)
        excerpt = source_line(locate.code, line)
        where = f" (`{excerpt}`)" if excerpt else ""
        message = (
            f"{use.function} tells the first generation step by the absence of a past{where}: `generate()` hands "
            f"the migrated model an empty Cache on its first step where it passed None before, so this test would "
            f"take the first step for a later one and the output would change; no rule rewrites it, and the file "
            f"was left unchanged. Test `{use.variable}.get_seq_length() > 0` for a Cache (and keep the test as it "
            "is for a tuple), by hand or with a rule"
        )
        result.append(Diagnostic(path, line, column, codes.UNKNOWN_IDIOM, message))
    return result


def past_hook_diagnostics(info: ModuleInfo, path: str, locate: Locator) -> list[Diagnostic]:
    """A generation hook written before transformers 4.26 (:mod:`cachemigrate.facts.past_hook`): ``generate()``
    passes ``past_key_values`` since 4.26, so ``past`` is always None there and generation never reuses the cache.
    A migration would keep that silently; the file is refused at the hook's ``past`` parameter, with what to do."""
    result = []
    for hook in past_hooks(info):
        line, column = locate(hook.parameter)
        message = (
            f'{hook.function.qualname} takes the past as `past` and hands it on as `"past_key_values": past`, but '
            "since transformers 4.26 `generate()` passes it as `past_key_values`: `past` is always None there, so "
            "generation never reuses the cache (every step runs on the whole sequence) and a migration would keep "
            "that silently; the file was left unchanged. Rename the parameter to `past_key_values` (keep `past` as "
            'an alias: `past_key_values = kwargs.pop("past", past_key_values)`) and run cachemigrate again, or let '
            "it do so with --fix-past-hook (`fix-past-hook = true` in [tool.cachemigrate])"
        )
        result.append(Diagnostic(path, line, column, codes.UNKNOWN_IDIOM, message))
    return result
