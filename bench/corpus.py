"""Corpus report: migrate every tuple-cache PyTorch modeling file of transformers releases, probe each migrated
file against its original, and write docs/corpus.md.

    python bench/corpus.py                              # the installed transformers and 4.35.2 (fetched once)
    python bench/corpus.py installed 4.35.2 --out docs/corpus.md
    python bench/corpus.py /path/to/transformers 4.35.2 --only llama gpt2 --no-probe
    python bench/corpus.py transformers-4.35.2-py3-none-any.whl --json report.json

A SOURCE is ``installed`` (the transformers this Python imports), a transformers source tree, a wheel (read in
place), or a release number: ``4.35.2`` is fetched with ``pip download --no-deps transformers==4.35.2`` into
``~/.cache/cachemigrate/corpus`` (``$CACHEMIGRATE_CORPUS_CACHE``), never into the repository. Files of older
releases are probed inside the installed transformers (4.35.2's files import under 4.51.3).

Every PyTorch file goes through ``cachemigrate migrate`` in memory (TF and Flax files are skipped, as the command
line skips them). The report has a row for each file with a tuple KV cache (the engine finds a legacy use of a
cache variable) and counts the files already on the Cache API, which must come out clean. Each migrated file is
probed in its own process.

Exit status: 0; 1 when a migrated file diverges in the probe, or the engine fails on a file (internal error); 2
on bad usage.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpuskit import families as family_table  # noqa: E402
from corpuskit.markdown import Row, render  # noqa: E402
from corpuskit.migrating import migrate_all  # noqa: E402
from corpuskit.probing import probe_pair  # noqa: E402
from corpuskit.sources import read_source, resolve  # noqa: E402

DEFAULT_SOURCES = ["installed", "4.35.2"]


def _arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="*", metavar="SOURCE", help="installed, a tree, a wheel or a release number")
    parser.add_argument("--out", type=Path, help="the markdown report (e.g. docs/corpus.md); default: print it")
    parser.add_argument("--json", type=Path, help="also write every row as JSON")
    parser.add_argument("--only", nargs="*", help="model folder names to keep (e.g. gpt2 llama)")
    parser.add_argument("--no-probe", action="store_true", help="migrate only")
    parser.add_argument("--era", default="4.52")
    parser.add_argument("--tier", default="dynamic", choices=("dynamic", "static", "upstream"))
    parser.add_argument("--line-length", type=int, default=119, help="transformers' own line length")
    parser.add_argument("--jobs", "-j", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds allowed per probed file")
    parser.add_argument("--keep", type=Path, help="write the original and migrated files here (default: a temp dir)")
    return parser.parse_args(argv)


def _probe_all(rows: list[Row], folder: Path, jobs: int, timeout: float, log) -> None:
    todo = [r for r in rows if r.migration.status == "migrated"]

    def one(row: Row) -> None:
        m = row.migration
        place = folder / m.version / m.relative.rsplit("/", 1)[0]
        for side, data in (("original", row.original), ("migrated", m.migrated)):
            (place / side).mkdir(parents=True, exist_ok=True)
            (place / side / m.relative.rsplit("/", 1)[1]).write_bytes(data)
        name = m.relative.rsplit("/", 1)[1]
        package = "transformers." + m.relative.rsplit("/", 1)[0].replace("/", ".")
        started = time.perf_counter()
        row.probe = probe_pair(place / "original" / name, place / "migrated" / name, package, timeout)
        log(f"probe {m.version} {m.relative}: {row.probe.verdict} ({time.perf_counter() - started:.0f}s)")

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        list(pool.map(one, todo))


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    families = family_table.load()
    specs = args.sources or DEFAULT_SOURCES
    log = lambda text: print(text, file=sys.stderr, flush=True)
    versions, files = [], []
    for spec in specs:
        version, found = read_source(resolve(spec))
        found = [f for f in found if not f.framework and (not args.only or f.model in args.only)]
        versions.append(version)
        files.extend(found)
        log(f"{spec}: transformers {version}, {len(found)} PyTorch modeling files")
    if not files:
        log("no PyTorch modeling files to report on")
        return 2
    started = time.perf_counter()
    migrations = migrate_all(files, args.era, args.tier, args.line_length, args.jobs)
    log(f"migrated in memory in {time.perf_counter() - started:.0f}s")
    originals = {(f.version, f.relative): f.data for f in files}
    rows = []
    for migration in migrations:
        if migration.tuple_cache:
            row = Row(migration, family_table.family_of(migration.model, families))
            row.original = originals[(migration.version, migration.relative)]
            rows.append(row)
    if not args.no_probe:
        with tempfile.TemporaryDirectory(prefix="cachemigrate-corpus-") as temp:
            _probe_all(rows, args.keep or Path(temp), args.jobs, args.timeout, log)
    from cachemigrate.probe import CHECK_NAMES

    command = "python bench/corpus.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    settings = f"era {args.era}, tier {args.tier}, releases {', '.join(versions)}"
    report = render(rows, migrations, families, versions, list(CHECK_NAMES), command.strip(), settings)
    if args.out:
        args.out.write_text(report, encoding="utf-8")
        log(f"wrote {args.out}")
    else:
        sys.stdout.write(report)
    if args.json:
        args.json.write_text(json.dumps([_row_json(r) for r in rows], indent=1), encoding="utf-8")
    bad = [r for r in rows if r.migration.status == "error" or (r.probe is not None and r.probe.verdict == "diverged")]
    return 1 if bad else 0


def _row_json(row: Row) -> dict:
    m = row.migration
    probe = None
    if row.probe is not None:
        probe = {"verdict": row.probe.verdict, "error": row.probe.error, "checks": row.probe.checks}
    return {
        "release": m.version,
        "file": m.relative,
        "model": m.model,
        "family": row.family,
        "status": m.status,
        "applied": m.applied,
        "diagnostics": m.diagnostics,
        "outcome": row.outcome,
        "probe": probe,
    }


if __name__ == "__main__":
    sys.exit(main())
