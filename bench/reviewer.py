"""Does the migrated code read like the file it came from? Import order and width, measured the way a reviewer's
linters would see them.

    python bench/reviewer.py                                  # the installed transformers' models/, era 4.52
    python bench/reviewer.py --models DIR --only gpt2 bloom   # some models of another release
    python bench/reviewer.py --fixtures                       # every fixtures/<era>/**/*after.py against its before
    python bench/reviewer.py --tree /path/to/other/checkout   # migrate with another checkout (a before/after)

For every file the migration changes (corpus: ``cachemigrate migrate --era ERA`` on a copy; fixtures: each
``*after.py`` is the migrated ``*before.py``), three checks run on the original and on the migrated file, at the
original's own width (:func:`cachemigrate.edit.width.infer_width`, the width cachemigrate itself infers when no config
says one; for the fixtures 119, the width the tests write them at):

- ``ruff check --select I001`` (imports sorted and formatted as isort would; ruff's isort with
  ``lines-after-imports = 2`` and ``known-first-party = ["transformers"]``, transformers' own settings);
- ``black --check -l WIDTH``;
- ``ruff format --check --line-length WIDTH``.

A check counts only where the original passes it: the table gives, per check, how many originals pass and how many
of those migrated files still pass, and names each file that regressed. ``ruff`` is looked up on PATH (or
``--ruff``); it is a reviewer's tool, not a dependency of cachemigrate.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run from a checkout without installing

from cachemigrate.edit.width import infer_width  # noqa: E402

ISORT = [
    "--config",
    "lint.isort.lines-after-imports = 2",
    "--config",
    'lint.isort.known-first-party = ["transformers"]',
]
CHECKS = ("ruff I001", "black --check", "ruff format --check")


def installed_models() -> Path:
    spec = importlib.util.find_spec("transformers")  # located, not imported
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("transformers is not installed: name a models/ folder with --models")
    return Path(list(spec.submodule_search_locations)[0]) / "models"


def corpus_pairs(
    models: Path, only: list[str], era: str, tree: Path, work: Path, jobs: int
) -> list[tuple[Path, Path]]:
    """(original, migrated) of every modeling file of ``models`` that the migration changes."""
    originals, migrated = work / "original", work / "migrated"
    for source in sorted(models.rglob("modeling_*.py")):
        relative = source.relative_to(models)
        if source.name.startswith(("modeling_tf_", "modeling_flax_")) or (
            only and not set(relative.parts[:-1]) & set(only)
        ):
            continue
        for root in (originals, migrated):
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, root / relative)
    entry = (  # the console script of this checkout or of an older one (cachemigrate/cli.py)
        "import sys; sys.argv[0] = 'cachemigrate'\n"
        "try:\n    from cachemigrate.cli.main import entry\n"
        "except ImportError:\n    from cachemigrate.cli import entry\n"
        "entry()"
    )
    command = [
        sys.executable,
        "-c",
        entry,
        "migrate",
        "--era",
        era,
        "-j",
        str(jobs),
        "--no-cache",
        "-q",
        str(migrated),
    ]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # run outside any checkout: `python -c` puts the working directory before PYTHONPATH
    done = subprocess.run(command, env=env, cwd=work, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1) or "Traceback" in done.stderr:
        raise SystemExit(f"cachemigrate migrate failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    pairs = []
    for after in sorted(migrated.rglob("modeling_*.py")):
        before = originals / after.relative_to(migrated)
        if before.read_bytes() != after.read_bytes():
            pairs.append((before, after))
    return pairs


def fixture_pairs(work: Path) -> list[tuple[Path, Path]]:
    """Every fixture pair, copied under ``work`` (``.py`` names that the checks take, outside the repo's config)."""
    pairs = []
    for after in sorted((REPO / "fixtures").rglob("*after.py")):
        before = after.with_name(after.name[: -len("after.py")] + "before.py")
        if not before.is_file() or before.read_bytes() == after.read_bytes():
            continue
        name = "_".join(after.relative_to(REPO / "fixtures").parent.parts + (before.name[: -len("before.py")] or "x",))
        copies = []
        for side, source in (("original", before), ("migrated", after)):
            target = work / side / f"{re.sub(r'[^A-Za-z0-9_]', '_', name)}.py"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            copies.append(target)
        pairs.append((copies[0], copies[1]))
    return pairs


def _failing(command: list[str], files: list[Path]) -> set[Path]:
    """The files a checker names as failing (it is run once over all of them)."""
    if not files:
        return set()
    done = subprocess.run([*command, *map(str, files)], capture_output=True, text=True, check=False)
    said = done.stdout + done.stderr
    return {f for f in files if re.search(rf"(^|[\s:]){re.escape(str(f))}(:|\s|$)", said, re.MULTILINE)}


def failures(files: list[Path], widths: dict[Path, int], ruff: str, black: str) -> dict[str, set[Path]]:
    """Per check, the files that fail it, each at its own width."""
    by_width: dict[int, list[Path]] = defaultdict(list)
    for path in files:
        by_width[widths[path]].append(path)
    failed: dict[str, set[Path]] = {check: set() for check in CHECKS}
    for width, group in by_width.items():
        isort = [ruff, "check", "--isolated", "--line-length", str(width), *ISORT, "--select", "I001"]
        failed["ruff I001"] |= _failing([*isort, "--output-format", "concise"], group)
        failed["black --check"] |= _failing([black, "--check", "-l", str(width)], group)
        failed["ruff format --check"] |= _failing(
            [ruff, "format", "--isolated", "--check", "--line-length", str(width)], group
        )
    return failed


def measure(pairs: list[tuple[Path, Path]], ruff: str, black: str, width: int | None = None) -> dict:
    """The checks over ``pairs``, each at ``width`` or, without it, at the original's own width."""
    widths = {}
    for before, after in pairs:
        widths[before] = widths[after] = width or infer_width(before.read_text(encoding="utf-8")).columns
    failed = failures([p for pair in pairs for p in pair], widths, ruff, black)
    rows = {}
    for check in CHECKS:
        passing = [(b, a) for b, a in pairs if b not in failed[check]]
        regressed = [a for b, a in passing if a in failed[check]]
        rows[check] = {
            "originals_pass": len(passing),
            "migrated_still_pass": len(passing) - len(regressed),
            "regressed": [str(a) for a in regressed],
        }
    return {"files": len(pairs), "widths": sorted(set(widths.values())), "checks": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, help="a transformers models/ folder (default: the installed one)")
    parser.add_argument("--only", nargs="*", default=[], help="model folders to take (default: all)")
    parser.add_argument("--era", default="4.52")
    parser.add_argument("--fixtures", action="store_true", help="the repo's fixture pairs instead of a corpus")
    parser.add_argument("--tree", type=Path, default=REPO, help="the cachemigrate checkout that migrates")
    parser.add_argument("-j", "--jobs", type=int, default=1)
    parser.add_argument("--ruff", default=shutil.which("ruff"), help="ruff executable (default: from PATH)")
    parser.add_argument("--black", default=shutil.which("black") or str(Path(sys.executable).with_name("black")))
    parser.add_argument("--json", type=Path, help="also write the result as JSON here")
    args = parser.parse_args()
    if not args.ruff:
        raise SystemExit("ruff is not on PATH: install it (pip install ruff) or name it with --ruff")
    with tempfile.TemporaryDirectory(prefix="reviewer-") as tmp:
        work = Path(tmp)
        if args.fixtures:
            pairs = fixture_pairs(work)
        else:
            models = args.models or installed_models()
            pairs = corpus_pairs(models, args.only, args.era, args.tree.resolve(), work, args.jobs)
        # the fixtures' after.py are written at the tests' width, Options(line_length=119)
        result = measure(pairs, args.ruff, args.black, 119 if args.fixtures else None)
        for row in result["checks"].values():
            row["regressed"] = [os.path.relpath(p, work / "migrated") for p in row["regressed"]]
    source = "fixtures" if args.fixtures else f"{args.models or 'installed transformers models/'} (era {args.era})"
    print(f"{result['files']} changed files of {source}, migrated by {args.tree}; widths {result['widths']}")
    print("| check | originals that pass | of those, migrated files that still pass |")
    print("|---|---|---|")
    for check, row in result["checks"].items():
        print(f"| {check} | {row['originals_pass']} | {row['migrated_still_pass']} |")
    for check, row in result["checks"].items():
        for path in row["regressed"]:
            print(f"regressed ({check}): {path}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
