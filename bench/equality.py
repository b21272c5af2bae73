"""Byte-for-byte equality of the engine's answers before and after a change: every output of a corpus recorded by
one checkout, and compared with another's.

    python bench/equality.py record OUT.json [--repo CHECKOUT] [--tree DIR ...] [--fixtures] [-j 2]
    python bench/equality.py compare OLD.json NEW.json [--common]

``record`` migrates, in the checkout ``--repo`` (default: this one), every ``modeling_*.py`` the CLI would take
under each ``--tree`` (era 4.52, or each ``--era``; tier dynamic) and every ``*before.py``/``*nomatch.py`` of the fixtures (the
fixture's era, every tier), in memory, and records per file and tier: the status, a hash of the migrated text,
the diagnostics (file:line:column, code, message) and the matches per rule. ``compare`` prints every difference
and exits 1 if there is one. Run ``record`` at the base commit (``git worktree add /tmp/base <commit>``, then
``--repo /tmp/base``) and at the change, then ``compare``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

TIERS = ("dynamic", "static", "upstream")
_WORKER: dict = {}


def _jobs(
    trees: list[Path], fixtures: Path | None, repo: Path, eras: tuple[str, ...] = ("4.52",)
) -> list[tuple[str, str, str, str]]:
    """(label, path, era, tier) for every file to migrate."""
    sys.path.insert(0, str(repo))
    try:
        from cachemigrate.source.walk import Selection, collect
    except ImportError:  # a checkout from before the stage subpackages
        from cachemigrate.walk import Selection, collect

    jobs = []
    for tree in trees:
        for path in sorted(str(p) for p in collect([tree], Selection())):
            for era in eras:
                jobs.append((path, path, era, "dynamic"))
    if fixtures is not None:
        for era in ("4.52", "4.56", "5"):
            for path in sorted((fixtures / era).rglob("*.py")):
                if path.name.endswith(("before.py", "nomatch.py")):
                    for tier in TIERS:
                        jobs.append((f"fixtures/{path.relative_to(fixtures)}", str(path), era, tier))
    return jobs


def _one(job: tuple[str, str, str, str]) -> tuple[str, dict]:
    label, path, era, tier = job
    import cachemigrate
    from cachemigrate.engine import migrate_source
    from cachemigrate.results import Options

    try:
        from cachemigrate.rules.loader import load_ruleset
    except ImportError:  # a checkout from before the stage subpackages
        from cachemigrate.rules import load_ruleset

    if era not in _WORKER:
        _WORKER[era] = load_ruleset(era)
    assert cachemigrate.__file__.startswith(_WORKER.get("repo", "")), cachemigrate.__file__
    code = Path(path).read_text(encoding="utf-8")
    result = migrate_source(code, _WORKER[era], Options(tier=tier, line_length=119), path=label)
    return f"{label} [{era} {tier}]", {
        "status": result.status,
        "migrated": hashlib.sha256(result.migrated.encode()).hexdigest(),
        "changed": result.migrated != code,
        "diagnostics": [f"{d.line}:{d.column}: {d.code} {d.message}" for d in result.diagnostics],
        "applied": dict(sorted(result.applied.items())),
    }


def _init(repo: str) -> None:
    sys.path.insert(0, repo)
    _WORKER["repo"] = repo


def record(args: argparse.Namespace) -> int:
    repo = args.repo.resolve()
    fixtures = repo / "fixtures" if args.fixtures else None
    jobs = _jobs([t.resolve() for t in args.tree], fixtures, repo, tuple(args.era or ["4.52"]))
    if args.every > 1:  # a sample: every n-th job, the same for every checkout
        jobs = jobs[:: args.every]
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    import cachemigrate

    assert Path(cachemigrate.__file__).is_relative_to(repo), f"cachemigrate comes from {cachemigrate.__file__}"
    out: dict = {"commit": commit.strip(), "files": {}}
    partial = args.out.with_suffix(".partial.jsonl")  # each answer as it comes: an interrupted run still compares
    with open(partial, "w") as stream:
        stream.write(json.dumps({"commit": out["commit"]}) + "\n")
        if args.jobs > 1:
            import multiprocessing

            with multiprocessing.get_context("spawn").Pool(args.jobs, _init, (str(repo),)) as pool:
                for key, value in pool.imap_unordered(_one, jobs, chunksize=1):
                    out["files"][key] = value
                    stream.write(json.dumps({key: value}) + "\n")
                    stream.flush()
        else:
            for job in jobs:
                key, value = _one(job)
                out["files"][key] = value
                stream.write(json.dumps({key: value}) + "\n")
                stream.flush()
    out["files"] = dict(sorted(out["files"].items()))
    args.out.write_text(json.dumps(out, indent=1))
    statuses: dict[str, int] = {}
    for value in out["files"].values():
        statuses[value["status"]] = statuses.get(value["status"], 0) + 1
    print(f"{len(out['files'])} answers from {out['commit'][:8]}: {statuses} -> {args.out}")
    return 0


def _load(path: Path) -> dict:
    """A finished record (.json), or the answers an interrupted one wrote (.partial.jsonl)."""
    if path.suffix == ".json":
        return json.loads(path.read_text())
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {"commit": lines[0]["commit"], "files": {k: v for line in lines[1:] for k, v in line.items()}}


def compare(args: argparse.Namespace) -> int:
    old, new = (_load(p) for p in (args.old, args.new))
    a, b = old["files"], new["files"]
    if args.common:  # records of different samples or interrupted runs: the answers both have
        a, b = ({k: v for k, v in x.items() if k in a and k in b} for x in (a, b))
    differ = 0
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b:
            print(f"{key}: only in {'new' if key not in a else 'old'}")
            differ += 1
        elif a[key] != b[key]:
            differ += 1
            for field in a[key]:
                if a[key][field] != b[key].get(field):
                    print(f"{key}: {field}: {a[key][field]!r} -> {b[key].get(field)!r}")
    print(f"{len(set(a) & set(b))} answers compared ({old['commit'][:8]} vs {new['commit'][:8]}): {differ} differ")
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record")
    rec.add_argument("out", type=Path)
    rec.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent)
    rec.add_argument("--tree", type=Path, action="append", default=[])
    rec.add_argument("--fixtures", action="store_true")
    rec.add_argument("--era", action="append", help="an era for the trees' files (repeatable; default 4.52)")
    rec.add_argument("-j", "--jobs", type=int, default=1)
    rec.add_argument("--every", type=int, default=1, help="a sample: every n-th file")
    cmp = commands.add_parser("compare")
    cmp.add_argument("old", type=Path)
    cmp.add_argument("new", type=Path)
    cmp.add_argument("--common", action="store_true", help="only the answers both records have")
    args = parser.parse_args()
    os.environ.setdefault("CACHEMIGRATE_CACHE_DIR", os.devnull)
    return record(args) if args.command == "record" else compare(args)


if __name__ == "__main__":
    sys.exit(main())
