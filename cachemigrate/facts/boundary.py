"""The file's cache layouts as facts for the rules: inside the attention, and at the model boundary.

* **Inside**: every attention of the file must concatenate in the same layout (:mod:`cachemigrate.facts.layout`).
* **Boundary**: what the base model takes and returns as a tuple, and so what heads, ``prepare_inputs_for_
  generation`` and ``_reorder_cache`` read. It is the inside layout, unless the base model converts the cache on
  the way in (``past_key_values = self._convert_to_rw_cache(past_key_values)``, a merge of batch and heads) and
  back on the way out (``presents = self._convert_cache_to_standard_format(presents, batch_size)``, the split):
  then the boundary is the inside layout with batch and heads apart (:mod:`cachemigrate.facts.converters`). With a Cache
  the attention converts its own tensors, and both model-level conversions go.

Facts (strings, usable in ``when`` and as bound holes): ``form`` ("pair", "fused"), ``cache_layout`` and
``boundary`` ("standard", "converted", "fused"), for pairs ``key_seq``/``value_seq`` (inside) and
``boundary_key_seq`` (axes, e.g. "-1"), ``stored_key_seq`` (the keys as the model reads them: the stored layout
where the attention reads its past through a swap of axes, :mod:`cachemigrate.facts.past_reads`),
``past_projection`` ("inline"; "helper" where the attention hands ``past[0]`` and ``past[1]`` to a projection
helper nested in it, which concatenates them), ``entry_converter``/``exit_converter``
(``self._convert_to_rw_cache``). Filters for the templates come with them
(:mod:`cachemigrate.facts.conversions`). A file whose layout cannot be told gets none of them, and a reason.
"""

from __future__ import annotations

import dataclasses

import libcst as cst
import libcst.matchers as m

from .analysis import ModuleInfo
from .uses import CACHE_GUARD
from .conversions import Unconvertible, attention_filters, model_filters
from .config_code import NotFromConfig, model_code
from .converters import Converter, converter_calls, find_converters
from .layout import Layout, TensorLayout, Unknown, attention_layout, reads_stored_only
from ..views.patterns import code_of
from ..views.ranks import RankScope, int_literal
from ..traverse import findall


@dataclasses.dataclass
class FileLayout:
    facts: dict[str, str] = dataclasses.field(default_factory=dict)
    filters: dict = dataclasses.field(default_factory=dict)  # "|name" -> callable, for the templates' fill
    predicates: dict = dataclasses.field(default_factory=dict)  # "?name" -> test of a capture, for patterns
    reason: str | None = None  # why there are no layout facts
    explained: bool = False  # the reason is a construct the legacy audit names at its own line
    node: cst.CSTNode | None = None  # the construct the reason names, where there is one
    converters: dict[str, Converter] = dataclasses.field(default_factory=dict)
    boundary_rank: int | None = None  # rank of a boundary tensor, for the views of heads
    boundary_key: TensorLayout | None = None  # the keys of the tuples the model takes and gives back


def file_layout(info: ModuleInfo, views, presents: str | None) -> FileLayout:
    result = FileLayout(converters=find_converters(info))
    calls = {f"self.{name}" for name in result.converters}
    result.predicates["?converter"] = lambda node: code_of(node) in calls
    # a test that does not already ask whether something is a Cache (a rule that adds that test stays idempotent)
    result.predicates["?no_cache_check"] = lambda node: not findall(node, CACHE_GUARD)
    # the sequence axis of the keys the model is handed: the boundary's, or a Cache's own where it is not known
    result.predicates["?sequence_axis"] = lambda node: int_literal(node) == int(
        result.facts.get("boundary_key_seq", "-2")
    )
    try:
        inside = _inside(info, views)
        boundary, entry, exit_ = _boundary(info, inside, result.converters)
        heads = _model_heads(info, boundary)
        container = _container(info, presents)
        filters = model_filters(boundary.form, boundary.key, boundary.value, heads, container)
        if inside.form == "pair":
            filters.update(attention_filters(inside.key, inside.value))
        # every conversion must be writable now, or the layout is no fact
        for name, make in filters.items():
            make(cst.Name("x"))
    except (Unknown, Unconvertible) as exc:
        result.reason = str(exc)
        result.explained = getattr(exc, "explained", False)
        result.node = getattr(exc, "node", None)
        return result
    facts = {"form": inside.form, "cache_layout": _kind(inside), "boundary": _kind(boundary)}
    facts["past_projection"] = inside.through  # "helper": the attention concatenates in a nested helper
    if inside.form == "pair":
        facts.update(key_seq=str(inside.key.seq), value_seq=str(inside.value.seq))
        facts["boundary_key_seq"] = str(boundary.key.seq)
        # the keys of the tuples the base model reads (its converters, if any, keep the sequence axis): as stored
        facts["stored_key_seq"] = str((inside.stored or inside).key.seq)
    if entry:
        facts["entry_converter"], facts["exit_converter"] = f"self.{entry}", f"self.{exit_}"
    result.facts = facts
    result.filters = {f"|{name}": make for name, make in filters.items()}
    result.boundary_rank = boundary.key.rank if boundary.key.rank == boundary.value.rank else None
    result.boundary_key = boundary.key if boundary.form == "pair" else None
    return result


def _kind(layout: Layout) -> str:
    if layout.form == "fused":
        return "fused"
    return "standard" if layout.standard else "converted"


def _inside(info: ModuleInfo, views) -> Layout:
    found: dict[Layout, list[str]] = {}
    # attentions that only read back what they stored (a cross-attention reusing its keys): they keep the layout
    # of the file's other attentions, when the one those store is standard (a Cache holds the tensors as they are)
    stored_only: list[Unknown] = []
    for name in info.roles["attention"]:
        fn = info.classes[name].methods.get("forward")
        if fn is None or not fn.cache_params:
            continue
        try:
            scope = lambda fn=fn: RankScope(lookup=views.oracle.lookup(fn.cls))  # noqa: E731
            layout = attention_layout(fn.node, views.of(fn.qualname), fn.cache_params[0], scope)
        except Unknown as exc:
            unknown = Unknown(f"in {fn.qualname}, {exc}", exc.explained, exc.node)
            if reads_stored_only(fn.node, fn.cache_params[0]):
                stored_only.append(unknown)
                continue
            raise unknown from None
        found.setdefault(layout, []).append(name)
    # what the file's tuples hold is the layout as stored (a past read through a swap or a merge of axes is stored
    # with them undone): where that one is standard, the Cache holds the tensors as the stored-only attention does
    if stored_only and (len(found) != 1 or not (next(iter(found)).stored or next(iter(found))).standard):
        raise stored_only[0]
    if not found:
        raise Unknown("no attention concatenates a past")
    if len(found) > 1:
        each = "; ".join(f"{', '.join(names)}: {layout.describe()}" for layout, names in found.items())
        raise Unknown(f"the attention classes keep their caches in different layouts ({each})")
    return next(iter(found))


def _boundary(info: ModuleInfo, inside: Layout, converters: dict[str, Converter]):
    """(boundary layout, entry converter name, exit converter name) of the base model."""
    entries, exits = [], []
    for name in info.roles["base_model"]:
        fn = info.classes[name].methods.get("forward")
        if fn is None or not fn.cache_params:
            continue
        cache = fn.cache_params[0]
        for target, converter, _ in converter_calls(fn.node, converters):
            (entries if target == cache else exits).append(converters[converter])
    stored = inside.stored or inside  # a past read through a swap of axes is stored with them swapped back
    if not entries and not exits:
        return stored, None, None
    if inside.stored is not None:
        raise Unknown("the base model converts its cache, and the attention reads it through a swap of axes")
    names = ", ".join(f"`self.{c.name}`" for c in entries + exits)
    if len(entries) != 1 or len(exits) != 1:
        raise Unknown(f"the base model converts its cache with {names}, not once on the way in and once out")
    entry, exit_ = entries[0], exits[0]
    if entry.kind != "merge" or exit_.kind != "split" or inside.form != "pair":
        raise Unknown(
            f"the base model converts its cache with {names}; cachemigrate understands a conversion in that merges "
            "batch and heads (`view(batch * heads, ...)`) and one out that splits them again, for keys and values "
            f"alike (here: in {entry.kind or 'something else'}, out {exit_.kind or 'something else'})"
        )
    if inside.key.heads is None or inside.value.heads is None:
        raise Unknown(f"the base model merges batch and heads with {names}, but the attention does not")
    boundary = Layout("pair", inside.key.unmerged(), inside.value.unmerged())
    return boundary, entry.name, exit_.name


def _model_heads(info: ModuleInfo, boundary: Layout) -> str | None:
    """The model's code for the heads factor of a merged boundary layout: the attention's ``self.<attr>``, set
    from ``config.<name>`` in its ``__init__``, is ``self.config.<name>`` in the model."""
    heads = {t.heads for t in (boundary.key, boundary.value) if t.heads is not None}
    if not heads:
        return None
    if len(heads) > 1:
        raise Unknown("keys and values merge batch with different head counts")
    code = heads.pop()
    reasons = []
    for name in info.roles["attention"]:
        init = info.classes[name].methods.get("__init__")
        if init is None:
            continue
        try:
            return model_code(init.node, code)
        except NotFromConfig as exc:
            reasons.append(str(exc))
    why = reasons[0] if reasons else f"no attention has an `__init__` that sets `{code}`"
    raise Unknown(
        f"the legacy cache merges batch and heads, and the model must split them with the attention's `{code}` read "
        f"off the config, but {why} (the model can read `config.<name>`, numbers, and attributes set from them, with "
        "operators and `a if c else b`)"
    )


def _container(info: ModuleInfo, presents: str | None) -> str:
    """ "list" where the base model accumulates its presents in a list (``presents = [] if use_cache else
    None``), else "tuple"."""
    listed = m.Assign(targets=[m.AssignTarget(m.Name(presents or ""))], value=m.IfExp(body=m.List([])))
    for name in info.roles["base_model"]:
        fn = info.classes[name].methods.get("forward")
        if fn is not None and presents and findall(fn.node, listed):
            return "list"
    return "tuple"


__all__ = ["FileLayout", "file_layout", "TensorLayout"]
