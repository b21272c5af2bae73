"""Robustness run: the engine over every PyTorch ``models/*/modeling_*.py`` of a transformers release.

    python bench/robustness.py                       # the installed transformers
    python bench/robustness.py path/to/transformers  # a source tree (the package folder, or a folder above it)
    python bench/robustness.py transformers-5.24.0-py3-none-any.whl   # a wheel, read in place (never unpacked)

Get a release without installing it: ``pip download --no-deps transformers==5.24.0 -d /tmp/tf`` (never commit it).

For every file, through the same bytes-in, bytes-out path as ``cachemigrate migrate``
(:func:`cachemigrate.cli.runner.migrate_bytes`):

- no internal error (an exception out of the engine);
- a migrated file compiles (``compile()``);
- a second run over the migrated output changes nothing;
- a file that is not migrated comes back byte-identical;
- a file the prefilter answers without the engine (:mod:`cachemigrate.source.prefilter`, as ``migrate`` uses it) is one
  the engine reports clean: the prefilter is only ever right.

Prints a table of counts and the violations; exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import re
import sys
import time
import traceback
import zipfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from cachemigrate.engine import Options  # noqa: E402
from cachemigrate.source.prefilter import nothing_to_migrate  # noqa: E402
from cachemigrate.rules.loader import load_ruleset  # noqa: E402
from cachemigrate.cli.runner import migrate_bytes  # noqa: E402

MODELING = re.compile(r"(?:^|/)transformers/models/[^/]+/modeling_(?!tf_|flax_)[^/]+\.py$")
CHECKS = (
    "internal error",
    "does not compile",
    "second run changes it",
    "unchanged but not byte-identical",
    "the prefilter skipped it",
)


@dataclasses.dataclass
class Outcome:
    name: str
    status: str  # migrated | clean | failed | error
    violations: list[str]
    seconds: float
    prefiltered: bool = False  # the prefilter answers "nothing to migrate" (migrate would not run the engine)


def modeling_files(source: Path) -> dict[str, bytes]:
    """``transformers/models/<model>/modeling_<x>.py`` (PyTorch only) -> bytes, from a tree or a wheel."""
    if source.is_file():
        with zipfile.ZipFile(source) as archive:
            return {n: archive.read(n) for n in sorted(archive.namelist()) if MODELING.search(n)}
    package = source if (source / "models").is_dir() else source / "transformers"
    files = sorted(package.glob("models/*/modeling_*.py"))
    return {f"transformers/{p.relative_to(package).as_posix()}": p.read_bytes() for p in files if MODELING.search(
        f"transformers/{p.relative_to(package).as_posix()}")}  # fmt: skip


def installed_transformers() -> Path:
    spec = importlib.util.find_spec("transformers")  # located, not imported
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("transformers is not installed: name a tree or a wheel")
    return Path(list(spec.submodule_search_locations)[0])


_STATE: tuple | None = None


def _init(era: str, tier: str, line_length: int) -> None:
    global _STATE
    _STATE = (load_ruleset(era), Options(tier=tier, line_length=line_length))


def check(name: str, data: bytes) -> Outcome:
    """Run one file twice and check the four properties."""
    ruleset, options = _STATE
    started = time.perf_counter()
    violations = []
    try:
        result = migrate_bytes(data, ruleset, options, path=name)
    except Exception:
        return Outcome(name, "error", [f"internal error: {traceback.format_exc(limit=3).strip()}"], 0.0)
    if result.changed:
        output = result.encoded()
        try:
            compile(output, name, "exec", dont_inherit=True)
        except SyntaxError as exc:
            violations.append(f"does not compile: line {exc.lineno}: {exc.msg}")
        try:
            again = migrate_bytes(output, ruleset, options, path=name)
            if again.changed:
                violations.append(f"second run changes it ({again.status})")
        except Exception as exc:
            violations.append(f"internal error on the second run: {type(exc).__name__}: {exc}")
    elif result.codec is not None and result.encoded() != data:
        violations.append("unchanged but not byte-identical")
    skipped = result.codec is not None and nothing_to_migrate(result.original, ruleset.era.cache_names)
    if skipped and result.status != "clean":
        violations.append(f"the prefilter skipped it, but the engine says {result.status}")
    return Outcome(name, result.status, violations, time.perf_counter() - started, skipped)


def run(files: dict[str, bytes], era: str, tier: str, line_length: int, jobs: int) -> list[Outcome]:
    if jobs <= 1:
        _init(era, tier, line_length)
        return [check(name, data) for name, data in files.items()]
    with ProcessPoolExecutor(jobs, initializer=_init, initargs=(era, tier, line_length)) as pool:
        return list(pool.map(check, files, files.values(), chunksize=4))


def table(outcomes: list[Outcome], seconds: float, label: str) -> str:
    statuses = {s: sum(o.status == s for o in outcomes) for s in ("migrated", "clean", "failed", "error")}
    lines = [f"{label}: {len(outcomes)} modeling files in {seconds:.0f}s", "", "| result | files |", "|---|---|"]
    lines += [f"| {status} | {count} |" for status, count in statuses.items()]
    lines += [f"| (of these, answered by the prefilter) | {sum(o.prefiltered for o in outcomes)} |"]
    lines += ["", "| check | violations |", "|---|---|"]
    for name in CHECKS:
        lines.append(f"| {name} | {sum(any(v.startswith(name) for v in o.violations) for o in outcomes)} |")
    bad = [o for o in outcomes if o.violations]
    if bad:
        lines += ["", "violations:"] + [f"  {o.name}: {v}" for o in bad for v in o.violations]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", nargs="?", type=Path, help="transformers tree or wheel (default: the installed one)")
    parser.add_argument("--era", default="4.52")
    parser.add_argument("--tier", default="dynamic", choices=("dynamic", "static", "upstream"))
    parser.add_argument("--line-length", type=int, default=119, help="transformers' own line length")
    parser.add_argument("--jobs", "-j", type=int, default=1)
    parser.add_argument("--only", nargs="*", help="model folder names to keep (e.g. gpt2 llama)")
    parser.add_argument("--limit", type=int, default=None, help="the first N files only")
    parser.add_argument("--verbose", "-v", action="store_true", help="a line per file: result, seconds")
    args = parser.parse_args(argv)
    source = args.source or installed_transformers()
    files = modeling_files(source)
    if args.only:
        files = {n: d for n, d in files.items() if n.split("/")[-2] in args.only}
    if args.limit:
        files = dict(list(files.items())[: args.limit])
    if not files:
        print(f"no PyTorch modeling files found in {source}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    outcomes = run(files, args.era, args.tier, args.line_length, args.jobs)
    if args.verbose:
        for outcome in outcomes:
            print(f"{outcome.status:<9} {outcome.seconds:6.1f}s  {outcome.name}")
    print(table(outcomes, time.perf_counter() - started, f"{source} (era {args.era}, tier {args.tier})"))
    return 1 if any(o.violations for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
