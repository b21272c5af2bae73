"""The target x runtime matrix of the README: each file migrated for each target era, run on that era's runtimes and
compared with the original run on transformers 4.51.3 by the cross-version probe.

    python bench/era_matrix.py --json /tmp/eramatrix.json --markdown /tmp/eramatrix.md
    python bench/era_matrix.py --files falcon,gpt2 --eras 5,portable

Files (``--set decoders``, the default): gpt2, decision_transformer, imagegpt, ctrl of the installed transformers
(4.51.3), and llama, mistral, opt, gptj, falcon of 4.35.2; ``--set seq2seq``: bart, mbart, marian, pegasus,
m2m_100, blenderbot, speecht5, musicgen, whisper and the T5 family of 4.35.2, xglm and biogpt of 4.51.3 (``--corpus-4.35.2``, default /work/corpus/4.35.2/transformers). Each is copied to the work
folder, migrated there with this checkout's command line (``cachemigrate migrate --era E --no-cache --report ...``),
and probed with ``run_cross_probe`` (the original under the 4.51.3 interpreter, the migrated file under the target
runtime's). Interpreters: $CACHEMIGRATE_TF4513_PYTHON (default: this one), $CACHEMIGRATE_TF4576_PYTHON (default
/work/venvs/tf4576/bin/python), $CACHEMIGRATE_TF5_PYTHON (default /work/venvs/tf525/bin/python); the version each
one runs is read back from the probe, not assumed. A runtime whose interpreter is missing is reported, not run.

A case passes when every check passes or is skipped, and the checks the issue asks for passed: logits within the
tolerance (``logits_no_cache``), tuple in -> tuple out, a Cache in -> the same Cache, ``generate()`` available,
greedy and beam tokens identical (the last three only for a file with a generation head). A seq2seq file with no
causal head is driven by the cross_* checks instead: tuple steps with encoder states, the cross part written once,
a DynamicCache for the self-attention alone, greedy and beam generation.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from cachemigrate.probe.cross import DEFAULT_ATOL, DEFAULT_RTOL, run_cross_probe  # noqa: E402

FILES = {
    "gpt2": "4.51.3",
    "decision_transformer": "4.51.3",
    "imagegpt": "4.51.3",
    "ctrl": "4.51.3",
    "llama": "4.35.2",
    "mistral": "4.35.2",
    "opt": "4.35.2",
    "gptj": "4.35.2",
    "falcon": "4.35.2",
}
# issue 16's files: the encoder-decoder and T5 families of 4.35.2, and two decoders of 4.51.3 (``--set seq2seq``)
SEQ2SEQ = {
    **{name: "4.35.2" for name in ("bart", "mbart", "marian", "pegasus", "m2m_100", "blenderbot", "speecht5",
                                   "musicgen", "whisper", "t5", "mt5", "longt5", "umt5", "switch_transformers")},
    "xglm": "4.51.3",
    "biogpt": "4.51.3",
}  # fmt: skip
SETS = {"decoders": dict(FILES), "seq2seq": SEQ2SEQ}
FILES.update(SEQ2SEQ)
TARGETS = {"4.56": ["4.57.6"], "5": ["5.25.0"], "portable": ["4.51.3", "4.57.6", "5.25.0"]}
PYTHONS = {
    "4.51.3": os.environ.get("CACHEMIGRATE_TF4513_PYTHON", sys.executable),
    "4.57.6": os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"),
    "5.25.0": os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"),
}
ASKED = ("logits_no_cache", "tuple_in_tuple_out", "cache_in_same_cache")
ASKED_WITH_HEAD = ("generate_available", "generate_greedy", "generate_beam")
NO_HEAD = "no generation head in the file"
SEQ2SEQ_ONLY = "encoder-decoder model only"
ASKED_SEQ2SEQ = ("cross_tuple_stepwise", "cross_cache_written_once", "cross_self_only_cache", "cross_generate")


def _models_of_4513() -> Path:
    script = (
        "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('transformers').origin).parent)"
    )
    done = subprocess.run([PYTHONS["4.51.3"], "-c", script], capture_output=True, text=True, check=True)
    return Path(done.stdout.strip()) / "models"


def copy_originals(work: Path, names: list[str], corpus_4352: Path) -> dict[str, Path]:
    roots = {"4.51.3": _models_of_4513(), "4.35.2": corpus_4352 / "models"}
    originals = {}
    for name in names:
        source = roots[FILES[name]] / name / f"modeling_{name}.py"
        target = work / "original" / name / source.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        originals[name] = target
    return originals


def migrate(work: Path, era: str, originals: dict[str, Path]) -> dict[str, dict]:
    """Copies of the originals migrated for ``era`` by the command line; {name: file row of its --report}."""
    copies = {}
    for name, original in originals.items():
        copy = work / era / name / original.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(original, copy)
        copies[str(copy.resolve())] = name
    report = work / era / "report.json"
    command = [
        sys.executable,
        "-m",
        "cachemigrate.cli.main",
        "migrate",
        "--era",
        era,
        "--no-cache",
        "--report",
        str(report),
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    subprocess.run([*command, *copies], capture_output=True, text=True, env=env)
    rows = {copies[str(Path(row["path"]).resolve())]: row for row in json.loads(report.read_text())["files"]}
    for name, row in rows.items():
        row["file"] = str(work / era / name / originals[name].name)
    return rows


def verdict(results: list[dict]) -> tuple[str, list[str]]:
    """("pass" | "fail", what is missing or wrong) of one probe's results."""
    statuses = {r["name"]: r for r in results}
    wrong = [f"{r['name']}: {r['status']} ({r['detail']})" for r in results if r["status"] not in ("pass", "skip")]
    no_head = statuses.get("generate_available", {}).get("detail") == NO_HEAD
    asked = ASKED + (() if no_head else ASKED_WITH_HEAD)
    if statuses.get("logits_no_cache", {}).get("detail", "").startswith(SEQ2SEQ_ONLY):
        asked = ASKED_SEQ2SEQ  # no causal head: the cross_* checks drive the model with encoder states
    for name in asked:
        if statuses.get(name, {}).get("status") != "pass":
            wrong.append(f"{name}: {statuses.get(name, {}).get('status', 'not run')}")
    return ("pass" if not wrong else "fail"), sorted(set(wrong))


def probe(original: Path, migrated: Path, name: str, runtime: str, rtol: float, atol: float) -> dict:
    python = PYTHONS[runtime]
    if not Path(python).is_file():
        return {"verdict": "not run", "problems": [f"no interpreter at {python}"]}
    started = time.perf_counter()
    report = run_cross_probe(
        original,
        migrated,
        original_python=PYTHONS["4.51.3"],
        migrated_python=python,
        package=f"transformers.models.{name}",
        rtol=rtol,
        atol=atol,
        timeout=600,
    )
    results = [{"name": r.name, "status": r.status, "detail": r.detail} for r in report.results]
    state, problems = verdict(results)
    counts = {s: sum(1 for r in results if r["status"] == s) for s in sorted({r["status"] for r in results})}
    return {
        "verdict": state,
        "problems": problems,
        "counts": counts,
        "original_transformers": report.original_transformers,
        "migrated_transformers": report.migrated_transformers,
        "tolerance": report.tolerance,
        "max_abs_diff": report.max_abs_diff,
        "no_head": any(r["detail"] == NO_HEAD for r in results),
        "seconds": round(time.perf_counter() - started, 1),
        "results": results,
    }


def grid(rows: list[dict]) -> str:
    """One line per file, one column per target and runtime: passed/skipped checks and the verdict."""
    columns = list(dict.fromkeys((row["era"], row["runtime"]) for row in rows))
    header = "| file | " + " | ".join(f"`{era}` on {runtime}" for era, runtime in columns) + " |"
    lines = [header, "|---" * (len(columns) + 1) + "|"]
    for name in dict.fromkeys(row["name"] for row in rows):
        cells = []
        for column in columns:
            row = next((r for r in rows if (r["era"], r["runtime"]) == column and r["name"] == name), None)
            p = (row or {}).get("probe") or {}
            if row is None:
                cells.append("-")
            elif not p:
                cells.append(row["status"])
            else:
                counts = p.get("counts") or {}
                cells.append(f"{p['verdict']} ({counts.get('pass', 0)}/{counts.get('skip', 0)})")
        lines.append(f"| {name} ({FILES[name]}) | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def markdown(rows: list[dict]) -> str:
    lines = [
        "| target | runtime | file | migrate | checks | asked-for checks | largest logit diff |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        p = row.get("probe") or {}
        counts = ", ".join(f"{n} {s}" for s, n in (p.get("counts") or {}).items()) or "-"
        asked = p.get("verdict", "-")
        if p.get("problems"):
            asked += ": " + "; ".join(p["problems"])
        elif p.get("no_head"):
            asked += " (no generation head: generate checks skipped)"
        diff = p.get("max_abs_diff")
        runtime = p.get("migrated_transformers") or row["runtime"]
        lines.append(
            f"| {row['era']} | {runtime} | {row['name']} ({FILES[row['name']]}) | {row['status']} | {counts} | "
            f"{asked} | {'-' if diff is None else f'{diff:.1e}'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=SETS, default="decoders", help="the files when --files is not given: "
                        "the nine decoders of the README's first matrix, or issue 16's seq2seq set")
    parser.add_argument("--files", default=None, help="comma-separated names (default: those of --set)")
    parser.add_argument("--eras", default=",".join(TARGETS), help="comma-separated targets (default: 4.56,5,portable)")
    parser.add_argument("--corpus-4.35.2", dest="corpus", type=Path, default=Path("/work/corpus/4.35.2/transformers"))
    parser.add_argument("--work", type=Path, help="folder for the copies (default: a temporary one, removed)")
    parser.add_argument("--rtol", type=float, default=DEFAULT_RTOL)
    parser.add_argument("--atol", type=float, default=DEFAULT_ATOL)
    parser.add_argument("--json", type=Path, help="write every row, with each check's result")
    parser.add_argument("--markdown", type=Path, help="write the table")
    args = parser.parse_args(argv)
    names = [n for n in (args.files or ",".join(SETS[args.set])).split(",") if n]
    unknown = [n for n in names if n not in FILES] + [e for e in args.eras.split(",") if e not in TARGETS]
    if unknown:
        parser.error(f"unknown file or target: {', '.join(unknown)}")
    work = args.work or Path(tempfile.mkdtemp(prefix="cachemigrate-eramatrix-"))
    rows = []
    try:
        originals = copy_originals(work, names, args.corpus)
        for era in args.eras.split(","):
            migrated = migrate(work, era, originals)
            for name in names:
                row = migrated[name]
                for runtime in TARGETS[era]:
                    entry = {"era": era, "runtime": runtime, "name": name, "status": row["status"]}
                    entry["diagnostics"] = row.get("diagnostics", [])
                    if row["status"] == "migrated":
                        entry["probe"] = probe(originals[name], Path(row["file"]), name, runtime, args.rtol, args.atol)
                    rows.append(entry)
                    p = entry.get("probe") or {}
                    print(
                        f"{era:8} {runtime:7} {name:22} {row['status']:9} {p.get('verdict', '-'):8} "
                        f"{p.get('counts', '')} {p.get('seconds', '')}s",
                        flush=True,
                    )
    finally:
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        if args.markdown:
            args.markdown.write_text(grid(rows) + "\n" + markdown(rows))
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    passed = sum(1 for r in rows if (r.get("probe") or {}).get("verdict") == "pass")
    print(f"era matrix: {passed} of {len(rows)} cases pass (tolerance rtol={args.rtol:g}, atol={args.atol:g})")
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
