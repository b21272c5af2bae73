"""What a migrated file would still use that its era's runtime removed (``[removed]`` of ``era.toml``): imports of
modules or names transformers deleted, and ``self.<method>(...)`` calls of ``PreTrainedModel`` methods it deleted
that the file does not define itself. Such a file would not import or run where it is meant to: it is reported
(CM908) and left unchanged, with what to do instead where ``[removed.instead]`` of the era (or of the nearest era it
extends that says) has advice for the entry."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import libcst.matchers as m

from .. import diagnostics as codes
from ..diagnostics import Diagnostic
from .eras import _era_table, lineage, removed_entry
from .schema import Era
from ..traverse import findall


def _dotted(node: cst.BaseExpression | None) -> str:
    if node is None:
        return ""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


def imported(module: cst.Module) -> list[tuple[str, str, cst.CSTNode]]:
    """(transformers module, name or "", node) for each import of a transformers module: relative imports of a
    file inside the package (``from ...modeling_utils import X``) and absolute ones (``transformers.x``)."""
    found = []
    for node in findall(module, m.ImportFrom() | m.Import()):
        if isinstance(node, cst.ImportFrom):
            source = _dotted(node.module)
            if not node.relative:
                if not source.startswith("transformers."):
                    continue
                source = source[len("transformers.") :]
            elif len(node.relative) < 2:  # `from .configuration_x import`: the model's own package
                continue
            names = node.names if not isinstance(node.names, cst.ImportStar) else []
            found.extend((source, _dotted(alias.name), node) for alias in names)
            if not names:
                found.append((source, "*", node))
        else:
            for alias in node.names:
                name = _dotted(alias.name)
                if name.startswith("transformers."):
                    found.append((name[len("transformers.") :], "", node))
    return found


def _defined_methods(module: cst.Module) -> set[str]:
    return {
        member.name.value
        for cls in module.body
        if isinstance(cls, cst.ClassDef)
        for member in cls.body.body
        if isinstance(member, cst.FunctionDef)
    }


def removed_advice(era: Era) -> dict[str, str]:
    """``[removed.instead]`` of the era and the eras it extends, per ``[removed] imports`` entry: what the user can
    do instead (the nearest era's word wins)."""
    root = Path(era.path).parent.parent
    advice: dict[str, str] = {}
    for name in reversed(lineage(era.name, root)):
        removed = _era_table(root / name / "era.toml").get("removed", {})
        table = removed.get("instead") if isinstance(removed, dict) else None
        if isinstance(table, dict):
            advice.update({key: value for key, value in table.items() if isinstance(value, str)})
    return advice


def removed_uses(
    original: cst.Module, migrated: cst.Module, era: Era, path: str, locate, text: str | None = None
) -> list[Diagnostic]:
    """CM908 for each import and method call of the migrated file that the era's runtime no longer has, located in
    the original file. ``text``: the migrated module's code, where known (a method it never names is not
    looked for)."""
    removed = era.removed
    if not removed.imports and not removed.methods:
        return []
    originals = {(source, name): node for source, name, node in imported(original)}
    advice = removed_advice(era) if era.path is not None else {}
    result = []
    for source, name, node in imported(migrated):
        entry = removed_entry(source, name, removed.imports)
        if entry is None:
            continue
        where = originals.get((source, name))
        line, column = locate(where) if where is not None else (1, 1)
        what = f"`{source}.{name}`" if name and name != "*" else f"the module `{source}`"
        result.append(
            Diagnostic(
                path,
                line,
                column,
                codes.REMOVED_API,
                f"the file imports {what}, which transformers {era.runtime} (era {era.name}) no longer has, and no "
                "rule of the era replaces it; the migrated file would not import there, so the file was left "
                "unchanged. "
                + (
                    f"Instead: {advice[entry]}"
                    if entry in advice
                    else "Import it from where that runtime defines it, or copy its definition into the file; or "
                    "migrate the file for an era whose runtime still has it"
                ),
            )
        )
    wanted = set(removed.methods) - _defined_methods(migrated)
    if not wanted or (text is not None and not any(name in text for name in wanted)):
        return result  # no call of a removed method can be left (the migrated text never names one)
    calls = findall(original, m.Call(func=m.Attribute(value=m.Name("self"))))
    reported = set()
    for call in findall(migrated, m.Call(func=m.Attribute(value=m.Name("self")))):
        method = call.func.attr.value
        if method in wanted and method not in reported:
            reported.add(method)
            first = next((c for c in calls if c.func.attr.value == method), None)
            line, column = locate(first) if first is not None else (1, 1)
            result.append(
                Diagnostic(
                    path,
                    line,
                    column,
                    codes.REMOVED_API,
                    f"`self.{method}(...)`: transformers {era.runtime} (era {era.name}) no longer has "
                    f"`PreTrainedModel.{method}`, and no rule of the era adds it; the migrated file would fail "
                    "there, so the file was left unchanged. Define the method in the file (the body it had in the "
                    "transformers release the file was written for), or migrate the file for an era whose runtime "
                    "still has it",
                )
            )
    return result
