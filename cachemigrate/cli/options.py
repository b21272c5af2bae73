"""What the commands share: their options, reading the configuration, choosing the era and the files, and the
usage errors (exit 2). Nothing here imports libcst, black or the engine."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .config import Config, ConfigError, find_pyproject, load_config, rules_dir_problem
from ..rules.eras import available_eras, era_for_installed, runtime_of
from ..source.walk import PatternError, collect, find_root, is_force_excluded
from ..source.writing import cannot_write

EXIT_OK, EXIT_CHANGES, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 123


def fail(message: str, code: int = EXIT_USAGE) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def resolve_era(requested: str, quiet: bool) -> str:
    if requested != "auto":
        if requested not in available_eras():
            fail(f"unknown era {requested!r}: known eras are {', '.join(available_eras())} (or auto)")
        return requested
    era, version = era_for_installed()
    if not quiet:
        if version:
            click.echo(f"era {era} (transformers {version} is installed)", err=True)
        else:
            click.echo(
                f"era {era} (transformers is not installed, so the runtime is unknown: the migrated code runs on "
                f"transformers {runtime_of(era)}; set `era` in [tool.cachemigrate] or pass --era to target one "
                "runtime)",
                err=True,
            )
    return era


def selection_options(command):
    """--include/--exclude/--extend-exclude/--force-exclude: gitignore-style patterns, repeatable."""
    options = [
        click.option("--include", "include", multiple=True, metavar="PATTERN",
                     help="Gitignore-style pattern of the files to take in directories (default: config, or "
                     "modeling_*.py). Repeatable."),
        click.option("--exclude", "exclude", multiple=True, metavar="PATTERN",
                     help="Paths to leave out of directory walks; replaces the default "
                     "(modeling_tf_*.py, modeling_flax_*.py) and the config's. Repeatable."),
        click.option("--extend-exclude", "extend_exclude", multiple=True, metavar="PATTERN",
                     help="Paths to leave out, added to --exclude. Repeatable."),
        click.option("--force-exclude/--no-force-exclude", "force_exclude", default=None,
                     help="Apply --exclude/--extend-exclude (and the config's) to files named on the command line "
                     "too, as pre-commit needs (default: config `force-exclude = true`, else off)."),
    ]  # fmt: skip
    for option in reversed(options):
        command = option(command)
    return command


def collect_files(paths, config: Config, patterns: dict, verbose: bool = False) -> list[Path]:
    """The files to migrate (see :mod:`cachemigrate.source.walk`); exits 2 on a missing path or a bad pattern. An entry
    a walk could not look at (a symlink loop) is a warning; one it left out on purpose is said with ``verbose``."""
    skipped = []
    try:
        files = collect(list(paths), config.selection(**patterns), find_root(list(paths)), skipped)
    except (FileNotFoundError, PatternError) as exc:
        fail(str(exc))
    for entry in skipped:
        if entry.problem or verbose:
            click.echo(f"{'warning' if entry.problem else 'note'}: {entry}", err=True)
    folders = [str(p) for p in paths if p != "-" and Path(p).is_dir()]
    if folders and not files:
        include = ", ".join(config.selection(**patterns).include)
        click.echo(f"note: no file in {', '.join(folders)} matches the include patterns ({include}); "
                   "name files directly or widen them with --include PATTERN", err=True)
    return files


def check_report(report: Path | None) -> None:
    """Exit 2 before anything is migrated or written if the report could not be written at the end."""
    problem = report and cannot_write(report)
    if problem:
        fail(f"--report {problem}")


def settings(paths, era, tier, rules, line_length) -> tuple[Config, str, str, tuple[Path, ...], int | None]:
    try:
        config = load_config(find_pyproject([Path(p) for p in paths]))
    except ConfigError as exc:
        fail(str(exc))
    check_rule_dirs(rules)
    return (
        config,
        era or config.era,
        tier or config.tier,
        tuple(Path(r) for r in rules) + config.rules,
        # None when neither says: each file's own width (--line-length is at least 1)
        line_length or config.line_length,
    )


def check_rule_dirs(rules) -> None:
    """Exit 2 on a ``--rules`` that is not a directory, before any file is answered (from the cache or not)."""
    for directory in rules:
        problem = rules_dir_problem(Path(directory))
        if problem:
            fail(f"--rules {directory}: {problem}")


def verify_options(command):
    """The options that ``verify`` and ``migrate --verify`` share."""
    options = [
        click.option("--tests", "tests", default=None, help="Test command (default: python -m pytest tests, in the "
                     "fork root: the nearest folder above the files with tests/ or pyproject.toml)."),
        click.option("--probe", is_flag=True, help="Also run the equivalence probe on each migrated modeling file."),
        click.option("--keep", is_flag=True, help="Keep the migrated files even when a test regresses."),
        click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds allowed per test run."),
    ]  # fmt: skip
    for option in reversed(options):
        command = option(command)
    return command


JOBS = click.IntRange(min=1)
LINE_LENGTH = click.IntRange(min=1)


def output_options(command):
    """-v, --color, --no-cache, --stdin-filename: how a run shows itself and where its files come from."""
    options = [
        click.option("--verbose", "-v", is_flag=True, help="A line for every file (clean ones too): status, how it "
                     "was answered (engine, prefilter, cache), time."),
        click.option("--color/--no-color", "color", default=None, help="Colour diffs and statuses (default: when "
                     "stdout is a terminal and NO_COLOR is not set)."),
        click.option("--no-cache", is_flag=True, help="Neither read nor write the result cache (default: "
                     "$CACHEMIGRATE_CACHE_DIR, else ~/.cache/cachemigrate)."),
        click.option("--stdin-filename", default=None, metavar="PATH", help="With `-` as the path: the name the "
                     "code on standard input has (for its pyproject.toml, --force-exclude and the diagnostics)."),
    ]  # fmt: skip
    for option in reversed(options):
        command = option(command)
    return command


def force_excluded(path: Path, config: Config, patterns: dict) -> bool:
    try:
        return is_force_excluded(path, config.selection(**patterns), find_root([path]))
    except PatternError as exc:
        fail(str(exc))
