"""Command line: ``cachemigrate migrate|verify|rules|probe``, in the way of black and ruff.

Exit codes: 0 all good; 1 ``--check`` found files that would change, or some file could not be migrated
(diagnostics); 2 bad usage or bad configuration; 123 an internal error.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from . import __version__
from .config import Config, ConfigError, find_pyproject, load_config
from .batch import Batch, migrate_files
from .engine import Options
from .rules import TIERS, RuleError, available_eras, era_for_installed, load_ruleset
from .walk import PatternError, collect, find_root
from .writing import cannot_write

EXIT_OK, EXIT_CHANGES, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 123


def _fail(message: str, code: int = EXIT_USAGE) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _resolve_era(requested: str, quiet: bool) -> str:
    if requested != "auto":
        if requested not in available_eras():
            _fail(f"unknown era {requested!r}: known eras are {', '.join(available_eras())} (or auto)")
        return requested
    era, version = era_for_installed()
    if not quiet:
        installed = f"transformers {version} is installed" if version else "transformers is not installed"
        click.echo(f"era {era} ({installed})", err=True)
    return era


def _selection_options(command):
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
        click.option("--force-exclude", "force_exclude", multiple=True, metavar="PATTERN",
                     help="Paths to leave out even when named on the command line (pre-commit). Repeatable."),
    ]  # fmt: skip
    for option in reversed(options):
        command = option(command)
    return command


def _collect(paths, config: Config, patterns: dict) -> list[Path]:
    """The files to migrate (see :mod:`cachemigrate.walk`); exits 2 on a missing path or a bad pattern."""
    try:
        return collect(list(paths), config.selection(**patterns), find_root(list(paths)))
    except (FileNotFoundError, PatternError) as exc:
        _fail(str(exc))


def _check_report(report: Path | None) -> None:
    """Exit 2 before anything is migrated or written if the report could not be written at the end."""
    problem = report and cannot_write(report)
    if problem:
        _fail(f"--report {problem}")


def _settings(paths, era, tier, rules, line_length) -> tuple[Config, str, str, tuple[Path, ...], int]:
    try:
        config = load_config(find_pyproject([Path(p) for p in paths]))
    except ConfigError as exc:
        _fail(str(exc))
    return (
        config,
        era or config.era,
        tier or config.tier,
        tuple(Path(r) for r in rules) + config.rules,
        line_length or config.line_length or 88,
    )


def _verify_options(command):
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


def _run_verify(
    paths, era, tier, rules, jobs, line_length, report, quiet, tests, probe, keep, timeout, patterns, **engine_options
) -> None:
    """Migrate PATHS with the fork's tests as the judge (see :mod:`cachemigrate.verify`); exits."""
    from .verify import VerifyOptions, verify

    config, era, tier, rule_dirs, line_length = _settings(paths, era, tier, rules, line_length)
    era = _resolve_era(era, quiet)
    _check_report(report)
    try:
        load_ruleset(era, rule_dirs)
    except RuleError as exc:
        _fail(str(exc))
    files = _collect(paths, config, patterns)
    engine = Options(tier=tier, line_length=line_length, **engine_options)  # the same engine options as migrate
    jobs = jobs or config.jobs
    options = VerifyOptions(era, tier, rule_dirs, engine, jobs, tests, probe, keep, timeout, report, quiet)
    sys.exit(verify(files, options))


@click.group()
@click.version_option(__version__, prog_name="cachemigrate")
def main() -> None:
    """Migrate transformers modeling code from tuple KV caches to the Cache API."""


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--era", default=None, help="API era to target (default: from the installed transformers, or config).")
@click.option("--tier", type=click.Choice(TIERS), default=None, help="How far to migrate (default: dynamic).")
@click.option("--diff", "show_diff", is_flag=True, help="Print a unified diff; write nothing.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if any file would change.")
@click.option("--rules", "rules", multiple=True, type=click.Path(path_type=Path), help="Extra rule directory.")
@click.option("--jobs", "-j", type=int, default=None, help="Files migrated in parallel (default: config, or 1).")
@click.option("--line-length", type=int, default=None, help="Line length for inserted code (default: pyproject).")
@click.option("--report", type=click.Path(path_type=Path), default=None, help="Write a JSON report here.")
@click.option("--quiet", "-q", is_flag=True, help="Only diagnostics and errors.")
@click.option(
    "--signature",
    type=click.Choice(["end", "upstream"]),
    default="end",
    help="Where new parameters go: last (default; positional callers keep working) or where upstream puts them.",
)
@click.option("--deprecation-version", default=None, help="The version @deprecate_kwarg names (upstream tier).")
@click.option("--verify", "verify", is_flag=True, help="Run the fork's tests before and after; undo on a regression.")
@_verify_options
@_selection_options
def migrate(
    paths,
    era,
    tier,
    show_diff,
    check,
    rules,
    jobs,
    line_length,
    report,
    quiet,
    signature,
    deprecation_version,
    verify,
    tests,
    probe,
    keep,
    timeout,
    **patterns,
) -> None:
    """Migrate PATHS (files, or directories searched for modeling_*.py) in place."""
    if verify:
        if show_diff or check:
            _fail("--verify writes the files; it cannot be combined with --diff or --check")
        engine_options = dict(signature=signature, deprecation_version=deprecation_version)
        _run_verify(
            paths,
            era,
            tier,
            rules,
            jobs,
            line_length,
            report,
            quiet,
            tests,
            probe,
            keep,
            timeout,
            patterns,
            **engine_options,
        )
    config, era, tier, rule_dirs, line_length = _settings(paths, era, tier, rules, line_length)
    era = _resolve_era(era, quiet)
    _check_report(report)
    try:
        load_ruleset(era, rule_dirs)  # fail early, in this process, on bad rule files
    except RuleError as exc:
        _fail(str(exc))
    files = _collect(paths, config, patterns)
    options = Options(tier=tier, line_length=line_length, signature=signature, deprecation_version=deprecation_version)
    batch = Batch(era, tier, rule_dirs, options, jobs or config.jobs, show_diff, check, report, quiet)
    sys.exit(migrate_files(files, batch))


@main.command("verify")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--era", default=None, help="API era to target (default: from the installed transformers, or config).")
@click.option("--tier", type=click.Choice(TIERS), default=None, help="How far to migrate (default: dynamic).")
@click.option("--rules", "rules", multiple=True, type=click.Path(path_type=Path), help="Extra rule directory.")
@click.option("--jobs", "-j", type=int, default=None, help="Files migrated in parallel (default: config, or 1).")
@click.option("--line-length", type=int, default=None, help="Line length for inserted code (default: pyproject).")
@click.option("--report", type=click.Path(path_type=Path), default=None, help="Write a JSON report here.")
@click.option("--quiet", "-q", is_flag=True, help="Only diagnostics, errors and the verdict.")
@click.option("--signature", type=click.Choice(["end", "upstream"]), default="end", help="As for migrate.")
@click.option("--deprecation-version", default=None, help="As for migrate.")
@_verify_options
@_selection_options
def verify_command(
    paths,
    era,
    tier,
    rules,
    jobs,
    line_length,
    report,
    quiet,
    signature,
    deprecation_version,
    tests,
    probe,
    keep,
    timeout,
    **patterns,
) -> None:
    """Migrate PATHS, run the fork's tests before and after, and restore the originals if a passing test breaks.

    Exit 0: no test regressed (the migration is kept). 1: a regression, a timeout or a probe failure (the
    originals are restored unless --keep), or files left unchanged with diagnostics. 2: the tests cannot run on
    the original code. Ctrl-C or SIGTERM restores the originals and exits 130 or 143.
    """
    engine_options = dict(signature=signature, deprecation_version=deprecation_version)
    _run_verify(
        paths,
        era,
        tier,
        rules,
        jobs,
        line_length,
        report,
        quiet,
        tests,
        probe,
        keep,
        timeout,
        patterns,
        **engine_options,
    )


@main.command("rules")
@click.option("--era", default=None, help="Era to list (default: from the installed transformers).")
@click.option("--rules", "rules", multiple=True, type=click.Path(path_type=Path), help="Extra rule directory.")
@click.option("--tier", type=click.Choice(TIERS), default=None, help="Only the rules a tier applies.")
def list_rules(era, rules, tier) -> None:
    """List the rules: id, era, tier, name and what each does."""
    era = _resolve_era(era or "auto", quiet=True)
    try:
        ruleset = load_ruleset(era, tuple(rules))
    except RuleError as exc:
        _fail(str(exc))
    chosen = ruleset.for_tier(tier) if tier else ruleset.rules
    for rule in chosen:
        click.echo(f"{rule.id}  {rule.era}  {rule.tier:<8}  {rule.name:<32}  {rule.description}")


@main.command()
@click.argument("original", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("migrated", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--check", "checks", multiple=True, help="Run only these checks (repeatable).")
@click.option("--static/--no-static", default=None, help="Run the static-cache checks (default: if claimed).")
@click.option("--seed", type=int, default=0)
@click.option(
    "--package",
    default=None,
    metavar="PACKAGE",
    help="Import files with relative imports inside PACKAGE, e.g. transformers.models.gpt2 "
    "(default: guessed from whichever file is named modeling_<name>.py).",
)
def probe(original, migrated, checks, static, seed, package) -> None:
    """Compare ORIGINAL and MIGRATED on a tiny random model with shared weights.

    Exit 0: every check passed or was skipped. 1: a check diverged (a difference, or an error of the migrated
    file only). 2: the probe could not be set up, or checks could not run on the original (set-up errors only).
    """
    from .probe import CHECK_NAMES, exit_status, format_table, run_probe, summary_line
    from .probe.report import DIVERGED, SETUP_ERROR, is_setup_failure

    unknown = [c for c in checks if c not in CHECK_NAMES]
    if unknown:
        _fail(f"unknown check(s) {', '.join(unknown)}: expected some of {', '.join(CHECK_NAMES)}")
    start = time.perf_counter()
    results = run_probe(original, migrated, checks=list(checks) or None, static=static, seed=seed, package=package)
    seconds = time.perf_counter() - start
    if is_setup_failure(results):
        click.echo(f"error: probe set-up: {results[0].detail}", err=True)
    else:
        click.echo(format_table(results))
    click.echo(summary_line(results, seconds))
    bad = [r.name for r in results if r.status in DIVERGED]
    if bad:
        click.echo(f"{len(bad)} of {len(results)} checks diverged: {', '.join(bad)}", err=True)
    setup = [r.name for r in results if r.status == SETUP_ERROR and r.name != "setup"]
    if setup:
        click.echo(
            f"set-up errors (the check cannot run on the original; not divergences): {', '.join(setup)}", err=True
        )
    sys.exit(exit_status(results))


def entry() -> None:  # pragma: no cover - console script wrapper
    try:
        main(standalone_mode=True)
    except SystemExit:
        raise
    except Exception as exc:
        click.echo(f"error: internal error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(EXIT_INTERNAL)


if __name__ == "__main__":  # pragma: no cover
    entry()
