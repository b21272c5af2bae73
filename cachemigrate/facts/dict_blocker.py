"""The refusal of a file whose past is a dict of parts per layer (:mod:`.dict_layout`), at the first real blocker.

What is recognised is said first (the parts, the written-once switch, the layout of keys and values: an
``EncoderDecoderCache``'s roles), then the first thing that stops the migration, at its own line:

- a field other than keys and values not proven dead (:mod:`.dict_proof`), at the line that writes it or at the
  caller where the proof stops: a Cache has nowhere to keep it;
- else, the part's write itself: no rule of the era rewrites a dict-of-parts past (yet).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from .. import diagnostics as codes
from ..diagnostics import Diagnostic
from .dict_layout import DictLayout, find
from .dict_proof import prove
from .layout_types import TensorLayout
from .model import CacheUse, ModuleInfo


def _recognised(layout: DictLayout, locate) -> str:
    parts = ", ".join(f'the {role} part (`"{key}"`)' for role, key in layout.parts.items())
    key, value = layout.field("key"), layout.field("value")
    stored = key.stored.describe() if key.stored else "a layout not shown"
    used = f", read back as {key.used.describe()}" if key.used and key.used != key.stored else ""
    once = (
        f"; the cross part is written once (`if {cst.Module([]).code_for_node(layout.written_once.test)}:` at line "
        f"{locate(layout.written_once)[0]})"
        if layout.written_once is not None
        else ""
    )
    order = layout.legacy_order()
    as_tuple = (
        ", and one layer's dict holds the encoder-decoder family's tuple (self keys, self values, cross keys, cross "
        "values): (" + ", ".join(f'`{layout.per_layer}["{part}"]["{name}"]`' for part, name in order) + ")"
        if order
        else ""
    )
    return (
        f"`{layout.cache}` keeps one dict per layer (`{layout.per_layer}`), fairseq style, with a dict per attention "
        f"part keyed by `{layout.part_key}` in {layout.forward}: {parts}, each holding `{key.name}` and "
        f"`{value.name}` stored {stored}{used}{once}. These are an EncoderDecoderCache's roles{as_tuple}"
    )


def dict_layout_diagnostic(
    module: cst.Module, info: ModuleInfo, use: CacheUse, era: str, path: str, locate, rules: list = ()
):
    """CM917 for a file whose past is a dict of parts, at its first blocker; None for any other file. ``rules``:
    the era's rules, whose ``dict_parts`` rule (if any) is said not to move this layout, and why."""
    layout = find(module, info, use.variable)
    if layout is None:
        return None
    said = _recognised(layout, locate)
    for field in layout.extras():
        proof = prove(info, layout, field)
        if not proof.dead:
            line, column = locate(proof.node or field.element)
            steps = "; ".join(proof.steps)
            return Diagnostic(
                path,
                line,
                column,
                codes.DICT_LAYOUT,
                f"{said}. But each part also keeps `{field.name}` (`{_code(field.element)}`), and an "
                f"EncoderDecoderCache keeps keys and values only: it was not proven dead ({steps + '; ' if steps else ''}"
                f"{proof.why}). Make it recomputable on every step (hand the attention the whole mask each step "
                f"instead of keeping it in the past), or port this cache by hand; the file was left unchanged",
            )
    dead = [
        f"`{f.name}` is dead in every past the models of the file hand out (over the file's own callers: {'; '.join(prove(info, layout, f).steps)})"
        for f in layout.extras()
    ]
    line, column = locate(layout.write)
    reorder = f", and {layout.reorder} walks the dicts for beams" if layout.reorder else ""
    mover = next((rule for rule in rules if rule.action == "dict_parts"), None)
    why = why_not(info, layout) if mover is not None else None
    blocker = (
        f"rule {mover.id} of era {era}, which moves a dict-of-parts past onto an EncoderDecoderCache, does not move "
        f"this one: {why}"
        if why
        else f"no rule of era {era} rewrites a dict-of-parts past yet"
    )
    return Diagnostic(
        path,
        line,
        column,
        codes.DICT_LAYOUT,
        f"{said}{'; ' + '; '.join(dead) if dead else ''}. But {blocker} "
        f"(this write of the part, its reads through `{layout.saved}`{reorder}): port it by hand to an "
        "EncoderDecoderCache (`self_attention_cache` / `cross_attention_cache` for the parts, `is_updated` for the "
        "cross part written once, `reorder_cache` for beams), or keep the model on its dicts; the file was left "
        "unchanged",
    )


def dict_parts_rules(module: cst.Module, info: ModuleInfo, use: CacheUse, rules: list) -> list:
    """The era's rules that move this file's dict-of-parts past onto an EncoderDecoderCache (``dict_parts``
    actions), when its layout is one they move (every other field of a part proven dead); none otherwise, and the
    file is refused at its first blocker (:func:`dict_layout_diagnostic`)."""
    chosen = [rule for rule in rules if rule.action == "dict_parts"]
    layout = find(module, info, use.variable) if chosen else None
    if layout is None or why_not(info, layout) is not None:
        return []
    # with them, the era's rules for any file (imports a release removed, vendored helpers) and for the file's
    # PreTrainedModel and heads (:func:`dict_roles`), but for those on a beam reorder (the dict_parts rule guards
    # its own, which walks the dicts)
    others = [
        rule
        for rule in rules
        if rule.role in ("any", "pretrained", "head")
        and rule.action != "dict_parts"
        and "_reorder_cache" not in rule.functions
    ]
    return chosen + others


def dict_roles(info: ModuleInfo) -> dict[str, list[str]]:
    """The roles of a file whose past is a dict of parts that the roles of :mod:`.roles` (read off tuple uses) do
    not give: ``pretrained``, its classes deriving from a ``PreTrainedModel`` of the library, and ``head``, the
    classes deriving from those that take the cache, prepare generation's inputs or reorder the past for beams."""
    classes = info.classes
    pretrained = [name for name, c in classes.items() if any(b.split(".")[-1] == "PreTrainedModel" for b in c.bases)]

    def derives(name: str, seen: frozenset = frozenset()) -> bool:
        return any(
            b in pretrained or (b in classes and b not in seen and derives(b, seen | {b})) for b in classes[name].bases
        )

    heads = [
        name
        for name, c in classes.items()
        if name not in pretrained
        and derives(name)
        and (
            (c.methods.get("forward") is not None and c.methods["forward"].cache_params)
            or "prepare_inputs_for_generation" in c.methods
            or "_reorder_cache" in c.methods
        )
    ]
    return {"pretrained": pretrained, "head": heads}


def why_not(info, layout: DictLayout) -> str | None:
    """Why the layout is not one this action moves onto an EncoderDecoderCache (None when it is)."""
    if layout.legacy_order() is None:
        return "its parts are not a self and a cross part holding keys and values stored [batch, heads, seq, dim]"
    if layout.static is None or layout.written_once is None or layout.saved is None:
        return "the cross part's written-once switch is not a local of the attention tested with the part's keys"
    for field in layout.extras():
        if not prove(info, layout, field).dead:
            return f"`{field.name}` is not proven dead"
    for field in (layout.field("key"), layout.field("value")):
        if field.used not in (None, field.stored, TensorLayout(3, -2, field.used and field.used.heads)):
            return f"`{field.name}` is read back in a layout other than [batch * heads, seq, dim]"
        if not m.matches(
            field.written, m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("view") | m.Name("reshape")))
        ):
            return f"`{field.name}` is not written as a view of one tensor"
    return None


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node).strip().rstrip(",")
