"""Era parity census: every tuple-cache PyTorch modeling file of transformers releases migrated for every era,
written to docs/corpus_eras.md.

    python bench/corpus_eras.py 4.6.1 4.30.2 4.35.2 installed --out docs/corpus_eras.md --json eras.jsonl
    python bench/corpus_eras.py /work/corpora/tf-4.35.2 --eras 4.56,5 --only bart whisper

SOURCEs are read as by bench/corpus.py (``installed``, a source tree, a wheel or a release number to fetch), or
a folder of remote-code folders (``fixtures/remote``: the remote-code styles, one row per era beside the releases). Each
file goes through ``cachemigrate migrate`` in memory (:mod:`corpuskit.migrating`) once per era; nothing is probed.
One row per release and era: of the files whose cache code a model class reaches (the rest are CM299, left
unchanged in every era), how many migrate. Then every file that migrates for one era and not for another, with the
diagnostics of the eras that refuse it: the property is that a file migrates in all eras or in none, except where a
diagnostic names an API the other runtime lacks and what to do.

Each file is migrated for every era before the next one (a file the engine answers before any rule runs, with no
tuple cache or with cache code no model reaches, is answered once for all eras: no rule is involved), and the
report is rewritten after each tuple-cache file, so a run that is stopped leaves a census of the files it
finished, parity complete for each of them (``--json`` keeps every result, one JSON line each, and ``--resume``
reads it back to skip what is done).

Exit status: 0; 1 when the engine fails on a file (internal error); 2 on bad usage.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cachemigrate.engine import Options  # noqa: E402
from cachemigrate.rules.loader import load_ruleset  # noqa: E402
from corpuskit.markdown import _cell, _codes  # noqa: E402
from corpuskit.migrating import Migration, migrate_with  # noqa: E402
from corpuskit.sources import read_source, resolve  # noqa: E402

DEFAULT_SOURCES = ["4.6.1", "4.30.2", "4.35.2", "installed"]
DEFAULT_ERAS = "4.52,4.56,5,portable"


def _arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="*", metavar="SOURCE", help="installed, a tree, a wheel or a release number")
    parser.add_argument("--eras", default=DEFAULT_ERAS, help=f"comma-separated (default {DEFAULT_ERAS})")
    parser.add_argument("--out", type=Path, help="the markdown report (e.g. docs/corpus_eras.md); default: print it")
    parser.add_argument("--json", type=Path, help="append every file's result here, one JSON line each")
    parser.add_argument("--resume", action="store_true", help="skip the cells already in --json")
    parser.add_argument("--only", nargs="*", help="model folder names to keep (e.g. bart whisper)")
    parser.add_argument("--first", nargs="*", default=[], help="model folder names to census before the others")
    parser.add_argument("--tier", default="dynamic", choices=("dynamic", "static", "upstream"))
    parser.add_argument(
        "--fix-past-hook", action="store_true", help="as `cachemigrate migrate --fix-past-hook` (pre-4.26 `past=` hooks)"
    )
    parser.add_argument("--line-length", type=int, default=119, help="transformers' own line length")
    return parser.parse_args(argv)


@dataclasses.dataclass
class Cell:
    """One file migrated for one era."""

    era: str
    migration: Migration

    def to_json(self) -> dict:
        m = self.migration
        return {
            "era": self.era,
            "release": m.version,
            "file": m.relative,
            "model": m.model,
            "status": m.status,
            "cache_api": m.cache_api,
            "applied": m.applied,
            "diagnostics": m.diagnostics,
        }

    @classmethod
    def from_json(cls, data: dict) -> "Cell":
        m = Migration(
            data["release"],
            data["file"],
            data["model"],
            data["status"],
            data["cache_api"],
            data["applied"],
            data["diagnostics"],
        )
        return cls(data["era"], m)


def census(cells: list[Cell], versions: list[str], eras: list[str]) -> dict:
    """Per (release, era): the tuple-cache files, the reachable ones, those that migrate, the internal errors;
    and per file the era -> cell map."""
    by_file: dict[tuple[str, str], dict[str, Cell]] = {}
    for cell in cells:
        if cell.migration.tuple_cache:
            by_file.setdefault((cell.migration.version, cell.migration.relative), {})[cell.era] = cell
    table = {}
    for version in versions:
        for era in eras:
            mine = [c[era] for (v, _), c in by_file.items() if v == version and era in c]
            if not mine:
                continue
            reachable = [c for c in mine if not c.migration.unreachable]
            table[(version, era)] = {
                "files": len(mine),
                "reachable": len(reachable),
                "migrated": sum(c.migration.status == "migrated" for c in reachable),
                "errors": sum(c.migration.status == "error" for c in mine),
            }
    return {"table": table, "by_file": by_file}


def _share(migrated: int, reachable: int) -> str:
    return f"{100 * migrated / reachable:.0f}%" if reachable else "–"


def render(result: dict, versions: list[str], eras: list[str], command: str, settings: str, done: str) -> str:
    table, by_file = result["table"], result["by_file"]
    lines = [
        "# Era parity census",
        "",
        f"Written by `{command}` ({settings}). {done}",
        "",
        "Every tuple-cache PyTorch modeling file of each release, migrated in memory for each era (nothing probed). "
        "*reachable*: a model class of the file reaches its cache code (the others are CM299, left unchanged in "
        "every era). *share*: of the reachable files, those that migrate.",
        "",
        "| release | era | tuple-cache files | reachable | migrate | share | internal errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for version in versions:
        for era in eras:
            row = table.get((version, era))
            if row is None:
                lines.append(f"| {version} | {era} | (not run) | | | | |")
                continue
            share = _share(row["migrated"], row["reachable"])
            lines.append(
                f"| {version} | {era} | {row['files']} | {row['reachable']} | {row['migrated']} | {share} | "
                f"{row['errors']} |"
            )
    split = []
    for (version, relative), per_era in sorted(by_file.items()):
        ran = [era for era in eras if era in per_era]
        migrates = [era for era in ran if per_era[era].migration.status == "migrated"]
        if migrates and len(migrates) < len(ran):
            split.append((version, relative, per_era, ran, migrates))
    lines += [
        "",
        f"## Files that migrate in one era and not in another ({len(split)})",
        "",
        "For each, the eras it migrates in, and the diagnostics of each era that refuses it.",
        "",
    ]
    if not split:
        lines.append("None.")
    else:
        lines += [
            "| release | file | migrates in | refused in | codes | first diagnostic |",
            "|---|---|---|---|---|---|",
        ]
        for version, relative, per_era, ran, migrates in split:
            for era in [e for e in ran if e not in migrates]:
                m = per_era[era].migration
                first = m.diagnostics[0] if m.diagnostics else m.status
                lines.append(
                    f"| {version} | {relative} | {', '.join(migrates)} | {era} | {_codes(m)} | {_cell(first)} |"
                )
    lines += ["", "## Refused in every era that ran", ""]
    refused = [
        (v, r, per_era)
        for (v, r), per_era in sorted(by_file.items())
        if per_era
        and all(c.migration.status not in ("migrated",) and not c.migration.unreachable for c in per_era.values())
    ]
    if not refused:
        lines.append("None.")
    else:
        lines += ["| release | file | " + " | ".join(eras) + " |", "|---|---|" + "---|" * len(eras)]
        for version, relative, per_era in refused:
            codes = [_codes(per_era[e].migration) if e in per_era else "" for e in eras]
            lines.append(f"| {version} | {relative} | " + " | ".join(codes) + " |")
    return "\n".join(lines) + "\n"


def _before_the_rules(migration: Migration) -> bool:
    """The engine answered before any rule ran, so every era answers the same (the eras share their cache names):
    no tuple cache (the prefilter, or on the Cache API), or cache code no model class reaches (CM299)."""
    return migration.unreachable or (migration.status == "clean" and not migration.diagnostics)


def _progress(sources, done: set, eras: list[str]) -> str:
    parts = []
    for version, files in sources:
        finished = sum(all((version, f.relative, era) in done for era in eras) for f in files)
        parts.append(f"{version}: {finished} of {len(files)} files" if finished < len(files) else f"{version}: all")
    state = "complete" if all(p.endswith(": all") for p in parts) else "partial (the run was stopped or is running)"
    return f"Census {state}: {'; '.join(parts)}."


def _done_cells(path: Path | None) -> list[Cell]:
    if path is None or not path.is_file():
        return []
    return [Cell.from_json(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line]


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    eras = [e.strip() for e in args.eras.split(",") if e.strip()]
    log = lambda text: print(text, file=sys.stderr, flush=True)
    sources = []
    for spec in args.sources or DEFAULT_SOURCES:
        version, found = read_source(resolve(spec))
        found = [f for f in found if not f.framework and (not args.only or f.model in args.only)]
        found.sort(key=lambda f: args.first.index(f.model) if f.model in args.first else len(args.first))
        sources.append((version, found))
        log(f"{spec}: transformers {version}, {len(found)} PyTorch modeling files")
    versions = [version for version, _ in sources]
    cells = _done_cells(args.json) if args.resume else []
    done = {(c.migration.version, c.migration.relative, c.era) for c in cells}
    if args.json and not args.resume:
        args.json.write_text("", encoding="utf-8")
    command = "python bench/corpus_eras.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    settings = f"tier {args.tier}, eras {', '.join(eras)}, releases {', '.join(versions)}"

    def write(note: str) -> None:
        report = render(census(cells, versions, eras), versions, eras, command.strip(), settings, note)
        if args.out:
            args.out.write_text(report, encoding="utf-8")
        else:
            sys.stdout.write(report)

    options = Options(tier=args.tier, line_length=args.line_length, fix_past_hook=args.fix_past_hook)
    states = {era: (load_ruleset(era), options) for era in eras}
    for version, files in sources:
        started = time.perf_counter()
        for file in files:
            todo = [era for era in eras if (version, file.relative, era) not in done]
            new = []
            for era in todo:
                if new and _before_the_rules(new[0].migration):  # the same in every era: no rule ran
                    new.append(Cell(era, new[0].migration))
                else:
                    new.append(Cell(era, migrate_with(file, *states[era])))
            cells.extend(new)
            done.update((version, file.relative, era) for era in todo)
            if args.json and new:
                with args.json.open("a", encoding="utf-8") as out:
                    out.writelines(json.dumps(cell.to_json()) + "\n" for cell in new)
            if args.out and new and any(c.migration.tuple_cache for c in new):
                write(_progress(sources, done, eras))
        log(f"{version}: {len(files)} files in {time.perf_counter() - started:.0f}s")
    write(_progress(sources, done, eras))
    return 1 if any(c.migration.status == "error" for c in cells) else 0


if __name__ == "__main__":
    sys.exit(main())
