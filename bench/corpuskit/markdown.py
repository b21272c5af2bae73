"""The markdown report: a summary per family and release, the false-positive check on Cache-API files, a row per
tuple-cache file (tier reached, rules applied, diagnostics, probe verdict), the probe matrix (one column per
check) and the full diagnostics."""

from __future__ import annotations

import dataclasses

from .families import Family
from .migrating import Migration
from .probing import ProbeOutcome

MARKS = {"pass": "✓", "skip": "–", "fail": "✗", "error": "E", "setup-error": "S"}


@dataclasses.dataclass
class Row:
    migration: Migration
    family: str
    probe: ProbeOutcome | None = None

    @property
    def outcome(self) -> str:
        """migrated+passing | migrated, diverged | migrated, not probed | refused | internal error"""
        status = self.migration.status
        if status == "migrated":
            if self.probe is None:
                return "migrated, not probed"
            return {"pass": "migrated, probe passes"}.get(self.probe.verdict, f"migrated, probe {self.probe.verdict}")
        if self.migration.unreachable:
            return "cache code not reachable, left unchanged"
        if status == "failed":
            return "refused with a diagnostic"
        return "internal error" if status == "error" else status


def _codes(migration: Migration) -> str:
    counts: dict[str, int] = {}
    for text in migration.diagnostics:
        code = text.split(" ", 2)[1] if text.count(" ") >= 2 else text
        counts[code] = counts.get(code, 0) + 1
    return ", ".join(f"{c}×{n}" if n > 1 else c for c, n in sorted(counts.items())) or "–"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary(rows: list[Row], families: dict[str, Family], versions: list[str]) -> list[str]:
    lines = [
        "| release | family | tuple-cache files | migrated | probe passes every applicable check | migrated, probe diverged | "
        "migrated, probe could not run | refused with a diagnostic | internal error | "
        "cache code not reachable (left unchanged) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for version in versions:
        for family in families.values():
            mine = [r for r in rows if r.migration.version == version and r.family == family.name]
            mine = [r for r in mine if r.migration.tuple_cache]
            if not mine:
                continue
            migrated = [r for r in mine if r.migration.status == "migrated"]
            passing = [r for r in migrated if r.probe is not None and r.probe.verdict == "pass"]
            diverged = [r for r in migrated if r.probe is not None and r.probe.verdict == "diverged"]
            # the original itself cannot run on a tiny model, or the probe crashed or timed out: nothing is proven
            unproven = [r for r in migrated if r.probe is not None and r.probe.verdict not in ("pass", "diverged")]
            refused = [r for r in mine if r.migration.status == "failed"]
            errors = [r for r in mine if r.migration.status == "error"]
            unreachable = [r for r in mine if r.migration.unreachable]
            lines.append(
                f"| {version} | {family.name} | {len(mine)} | {len(migrated)} | {len(passing)} | {len(diverged)} | "
                f"{len(unproven)} | {len(refused)} | {len(errors)} | {len(unreachable)} |"
            )
    return lines


def goal_lines(rows: list[Row], families: dict[str, Family], versions: list[str], goal: str) -> list[str]:
    """One line per release: how many tuple-cache files of the families of ``goal`` migrate and pass; files whose
    cache code no model class reaches (left unchanged, exit 0) are counted apart, outside the share."""
    names = {f.name for f in families.values() if f.goal == goal}
    lines = []
    for version in versions:
        mine = [r for r in rows if r.migration.version == version and r.family in names and r.migration.tuple_cache]
        unreachable = [r for r in mine if r.migration.unreachable]
        mine = [r for r in mine if not r.migration.unreachable]
        if not mine and not unreachable:  # a release with no file of the goal (--only left them out)
            continue
        passing = [r for r in mine if r.outcome == "migrated, probe passes"]
        migrated = [r for r in mine if r.migration.status == "migrated"]
        share = f"{100 * len(passing) / len(mine):.0f}%" if mine else "–"
        line = (
            f"- {version}: {len(passing)} of {len(mine)} {goal} tuple-cache files ({share}) migrate in the "
            "dynamic tier and pass every applicable probe check"
        )
        if goal != "decoder-only":  # the decoder-only line keeps its wording
            line += f" ({len(migrated)} migrate)"
            if unreachable:
                line += f"; {len(unreachable)} more left unchanged: no model class reaches their cache code (CM299, exit 0)"
        lines.append(line + ".")
    return lines


def false_positives(migrations: list[Migration], versions: list[str]) -> list[str]:
    lines = [
        "| release | files on the Cache API | clean (left untouched, `--check` exits 0) | not clean |",
        "|---|---|---|---|",
    ]
    bad = []
    for version in versions:
        mine = [m for m in migrations if m.version == version and m.cache_api]
        unclean = [m for m in mine if m.status != "clean"]
        bad.extend(unclean)
        lines.append(f"| {version} | {len(mine)} | {len(mine) - len(unclean)} | {len(unclean)} |")
    if bad:
        lines += ["", "Cache-API files the tool does not leave alone (false positives):", ""]
        lines += [f"- {m.version} `{m.relative}`: {m.status}; {_codes(m)}" for m in bad]
    return lines


def file_table(rows: list[Row], families: dict[str, Family], version: str) -> list[str]:
    lines = []
    for family in families.values():
        mine = [
            r for r in rows if r.migration.version == version and r.family == family.name and r.migration.tuple_cache
        ]
        if not mine:
            continue
        lines += ["", f"#### {family.name}: {family.title}", ""]
        lines += ["| file | tier reached | rules applied | diagnostics | result |", "|---|---|---|---|---|"]
        for row in sorted(mine, key=lambda r: r.migration.relative):
            m = row.migration
            tier = "dynamic" if m.status == "migrated" else "–"
            rules = ", ".join(m.applied) or "–"
            lines.append(f"| `{m.relative}` | {tier} | {rules} | {_codes(m)} | {row.outcome} |")
    return lines


def probe_matrix(rows: list[Row], version: str, checks: list[str]) -> list[str]:
    probed = [r for r in rows if r.migration.version == version and r.probe is not None]
    if not probed:
        return []
    lines = ["", "| file | " + " | ".join(checks) + " |", "|---|" + "---|" * len(checks)]
    notes = []
    for row in sorted(probed, key=lambda r: r.migration.relative):
        name = row.migration.relative.rsplit("/", 1)[1]
        if row.probe.error:
            lines.append(f"| `{name}` | " + " | ".join("E" for _ in checks) + " |")
            notes.append(f"- `{name}`: {_cell(row.probe.error)}")
            continue
        cells = []
        for check in checks:
            status, detail = row.probe.checks.get(check, ("skip", "not run"))
            cells.append(MARKS.get(status, status))
            if status not in ("pass", "skip"):
                notes.append(f"- `{name}` {check}: {status}: {_cell(detail)}")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    skips = sorted({(c, d) for r in probed if r.probe.checks for c, (s, d) in r.probe.checks.items() if s == "skip"})
    lines += [
        "",
        "✓ pass, – skipped (does not apply), ✗ fail, E error, S set-up error: the original itself cannot run the "
        "check on the tiny model, so the check does not apply (a file whose probe compared nothing counts as "
        '"could not run").',
    ]
    if notes:
        lines += ["", "Checks that did not pass or skip:", "", *notes]
    if skips:
        lines += ["", "Why checks were skipped:", ""]
        by_reason: dict[str, list[str]] = {}
        for check, detail in skips:
            by_reason.setdefault(detail, []).append(check)
        lines += [f"- {', '.join(sorted(set(cs)))}: {_cell(d)}" for d, cs in sorted(by_reason.items())]
    return lines


def diagnostics(rows: list[Row], version: str) -> list[str]:
    lines = []
    for row in sorted(rows, key=lambda r: r.migration.relative):
        m = row.migration
        if m.version != version or not m.diagnostics or not m.tuple_cache:
            continue
        lines += [f"- `{m.relative}`:"]
        lines += [f"  - {_cell(text)}" for text in m.diagnostics]
    return lines


def goals(rows: list[Row], families: dict[str, Family], versions: list[str]) -> list[str]:
    """A section per goal that some family of the table names (decoder-only first), for the releases that have
    files of it; a goal with no file in the report has no section."""
    out = []
    for goal in dict.fromkeys(["decoder-only", *(f.goal for f in families.values() if f.goal)]):
        found = goal_lines(rows, families, versions, goal)
        if found:
            out += [f"## {goal[0].upper() + goal[1:]} goal", "", *found, ""]
    return out


def render(rows, migrations, families, versions, checks, command: str, settings: str) -> str:
    out = [
        "# Corpus report",
        "",
        f"Written by `{command}` ({settings}). Every PyTorch modeling file of each release goes through "
        "`cachemigrate migrate` in memory; each migrated file is then probed against its original "
        "(`cachemigrate probe`, one process per file, inside the installed transformers). Families come from "
        "`bench/corpus_families.toml`. Do not edit by hand: run the command again.",
        "",
        *goals(rows, families, versions),
        "## Tuple-cache files per family",
        "",
        *summary(rows, families, versions),
        "",
        "## False positives: files already on the Cache API",
        "",
        *false_positives(migrations, versions),
    ]
    for version in versions:
        out += ["", f"## transformers {version}", "", "### Files"]
        out += file_table(rows, families, version)
        matrix = probe_matrix(rows, version, checks)
        if matrix:
            out += ["", "### Probe, per check", *matrix]
        found = diagnostics(rows, version)
        if found:
            out += ["", "### Diagnostics", "", *found]
    return "\n".join(out) + "\n"
