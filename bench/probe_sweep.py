"""The cross-version probe over every file of a tree that migrates for one era: silent divergence, file by file, on
the era's runtime (a measurement, not a test).

    python bench/probe_sweep.py --era 4.56 --runtime /work/venvs/tf4576/bin/python --out /tmp/sweep456.jsonl
    python bench/probe_sweep.py --era 5 --runtime /work/venvs/tf525/bin/python --out /tmp/sweep5.jsonl
    python bench/probe_sweep.py --tree /work/corpora/tf-4.35.2/transformers --era 4.56 --out ... --only bark fsmt
    python bench/probe_sweep.py --summary /tmp/sweep456.jsonl          # the table of a finished (or partial) run

The PyTorch modeling files of ``TREE/models/*/`` (default: the transformers installed with this interpreter) are
copied to a work folder and migrated there for ``--era`` by this checkout's command line (``migrate --no-cache
--fix-past-hook --report``). Each file the report says migrated is then probed against its original (``cachemigrate
probe`` in cross-version mode: the original with this interpreter, which must be able to run it, e.g. transformers
4.51.3; the migrated file with ``--runtime``), imported in its model's transformers package. One JSON line per file
goes to ``--out`` as soon as it is probed; a rerun with the same ``--out`` skips the files already there.

The summary counts, per file, the checks that passed, were skipped, diverged (``fail``/``error``: the migrated file
differs, or only it raised), and the set-up errors (the original cannot be driven by the tiny probe here, or both
files raise alike: not a divergence), and lists every check that diverged with its detail.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from cachemigrate.probe.cross import DEFAULT_ATOL, DEFAULT_RTOL, run_cross_probe  # noqa: E402

DIVERGED = ("fail", "error")


def installed_tree() -> Path:
    import transformers

    return Path(transformers.__file__).parent


def copy_tree(tree: Path, work: Path, only: list[str]) -> None:
    for source in sorted((tree / "models").glob("*/modeling_*.py")):
        if source.name.startswith(("modeling_tf_", "modeling_flax_")) or (only and source.parent.name not in only):
            continue
        target = work / source.parent.name / source.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


def migrate(work: Path, era: str) -> list[Path]:
    """The files of ``work`` that migrate for ``era`` (migrated in place)."""
    report = work.parent / f"report-{era}.json"
    command = [sys.executable, "-m", "cachemigrate.cli.main", "migrate", "--era", era, "--no-cache", "-q"]
    command += ["--fix-past-hook", "--report", str(report), str(work)]
    subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    return [Path(row["path"]) for row in json.loads(report.read_text())["files"] if row.get("status") == "migrated"]


def probe(original: Path, migrated: Path, runtime: str) -> list[list[str]]:
    try:
        report = run_cross_probe(
            original,
            migrated,
            original_python=sys.executable,
            migrated_python=runtime,
            package=f"transformers.models.{original.parent.name}",
            rtol=DEFAULT_RTOL,
            atol=DEFAULT_ATOL,
            timeout=600,
        )
    except Exception as exc:  # the harness itself: reported as a set-up error of that file
        return [["setup", "setup-error", f"{type(exc).__name__}: {exc}"[:400]]]
    return [[r.name, r.status, r.detail[:400]] for r in report.results]


def summary(out: Path) -> str:
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    lines = [f"{len(rows)} files probed (era {rows[0]['era']} on {rows[0]['runtime']})" if rows else "nothing probed"]
    clean = [r for r in rows if not any(s in DIVERGED or s == "setup-error" for _, s, _ in r["results"])]
    unprobed = [r for r in rows if any(n == "setup" for n, _, _ in r["results"])]
    diverged = [r for r in rows if any(s in DIVERGED for _, s, _ in r["results"])]
    lines.append(f"no divergence and no set-up error: {len(clean)}; diverged: {len(diverged)}; "
                 f"not probed (the original's set-up failed): {len(unprobed)}")  # fmt: skip
    for row in diverged:
        lines.append(f"- {row['name']}:")
        lines += [f"    {name} {status}: {detail}" for name, status, detail in row["results"] if status in DIVERGED]
    for row in unprobed:
        lines.append(f"- {row['name']} not probed: {row['results'][0][2][:200]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, help="a transformers package folder (default: the installed one)")
    parser.add_argument("--era", help="the era to migrate for")
    parser.add_argument("--runtime", default=sys.executable, help="the interpreter the migrated files run with")
    parser.add_argument("--only", nargs="*", default=[], help="model folders to take (default: all)")
    parser.add_argument("--out", type=Path, help="JSON lines, one per probed file (appended; reruns resume)")
    parser.add_argument("--summary", type=Path, help="print the summary of a JSON-lines file and stop")
    args = parser.parse_args(argv)
    if args.summary:
        print(summary(args.summary))
        return 0
    if not args.era or not args.out:
        parser.error("--era and --out are required (or --summary)")
    tree = args.tree or installed_tree()
    done = set()
    if args.out.exists():
        done = {json.loads(line)["name"] for line in args.out.read_text().splitlines() if line.strip()}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "models"
        copy_tree(tree, work, args.only)
        migrated = migrate(work, args.era)
        print(f"{len(migrated)} files migrate for {args.era}", flush=True)
        for path in migrated:
            name = f"{path.parent.name}/{path.name}"
            if name in done:
                continue
            results = probe(tree / "models" / path.parent.name / path.name, path, args.runtime)
            row = {"name": name, "era": args.era, "runtime": args.runtime, "results": results}
            with args.out.open("a") as handle:
                handle.write(json.dumps(row) + "\n")
            counts = {s: sum(1 for _, t, _ in results if t == s) for s in sorted({t for _, t, _ in results})}
            print(name, counts, flush=True)
    print(summary(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
