"""Command line: ``cachemigrate migrate|verify|rules|probe``, in the way of black and ruff.

Exit codes: 0 all good; 1 ``--check`` found files that would change, some file could not be migrated
(diagnostics), or the report could not be written; 2 bad usage or bad configuration; 123 an internal error.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from .. import __version__
from .batch import Batch, migrate_files
from .result_cache import default_dir
from .options import (
    EXIT_INTERNAL,
    JOBS,
    LINE_LENGTH,
    check_report,
    check_rule_dirs,
    collect_files,
    fail,
    force_excluded,
    output_options,
    resolve_era,
    selection_options,
    settings,
    verify_options,
)
from .progress import color_default
from ..results import Options
from ..rules.schema import TIERS, RuleError

# Nothing here imports libcst, black or the engine at start-up: a run whose files are all clean or cached
# never loads them (cachemigrate.cli.runner). The commands that need them import them when they run.


def _run_verify(
    paths, era, tier, rules, jobs, line_length, report, quiet, tests, probe, keep, timeout, patterns, **engine_options
) -> None:
    """Migrate PATHS with the fork's tests as the judge (see :mod:`cachemigrate.verify`); exits."""
    from ..rules.loader import load_ruleset
    from ..verify import VerifyOptions, verify

    config, era, tier, rule_dirs, line_length = settings(paths, era, tier, rules, line_length)
    era = resolve_era(era, quiet)
    check_report(report)
    try:
        load_ruleset(era, rule_dirs)
    except RuleError as exc:
        fail(str(exc))
    files = collect_files(paths, config, patterns)
    if engine_options.get("fix_past_hook") is None:
        engine_options["fix_past_hook"] = config.fix_past_hook
    engine = Options(tier=tier, line_length=line_length, **engine_options)  # the same engine options as migrate
    jobs = jobs or config.jobs
    options = VerifyOptions(era, tier, rule_dirs, engine, jobs, tests, probe, keep, timeout, report, quiet)
    sys.exit(verify(files, options))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
@click.option("--jobs", "-j", type=JOBS, default=None, help="Files migrated in parallel (default: config, or 1).")
@click.option(
    "--line-length", type=LINE_LENGTH, default=None, help="Line length for inserted code (default: pyproject)."
)
@click.option("--report", type=click.Path(path_type=Path), default=None, help="Write a JSON report here.")
@click.option("--quiet", "-q", is_flag=True, help="Only diagnostics and errors.")
@output_options
@click.option(
    "--signature",
    type=click.Choice(["end", "upstream"]),
    default="end",
    help="Where new parameters go: last (default; positional callers keep working) or where upstream puts them.",
)
@click.option("--deprecation-version", default=None, help="The version @deprecate_kwarg names (upstream tier).")
@click.option(
    "--fix-past-hook/--no-fix-past-hook",
    default=None,
    help="Rename a generation hook's `past` parameter to `past_key_values` (generate() passes that since 4.26; "
    "`past` stays an alias) before migrating; without it such a file is refused (default: config "
    "`fix-past-hook`, else off).",
)
@click.option("--verify", "verify", is_flag=True, help="Run the fork's tests before and after; undo on a regression.")
@verify_options
@selection_options
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
    verbose,
    color,
    no_cache,
    stdin_filename,
    signature,
    deprecation_version,
    fix_past_hook,
    verify,
    tests,
    probe,
    keep,
    timeout,
    **patterns,
) -> None:
    """Migrate PATHS (files, or directories searched for modeling_*.py) in place; `-` reads standard input and
    writes the result to standard output."""
    stdin = "-" in [str(p) for p in paths]
    if stdin and (len(paths) > 1 or verify or report):
        fail("`-` (standard input) is the only path when given, and takes neither --verify nor --report")
    if stdin_filename and not stdin:
        fail("--stdin-filename names the code read from `-` (standard input); no `-` was given")
    if quiet and verbose:
        fail("--quiet and --verbose cannot be combined")
    if verify:
        if show_diff or check:
            fail("--verify writes the files; it cannot be combined with --diff or --check")
        engine_options = dict(
            signature=signature, deprecation_version=deprecation_version, fix_past_hook=fix_past_hook
        )
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
    where = ([Path(stdin_filename)] if stdin_filename else []) if stdin else list(paths)
    config, era, tier, rule_dirs, line_length = settings(where, era, tier, rules, line_length)
    era = resolve_era(era, quiet or not verbose and stdin)
    check_report(report)
    options = Options(
        tier=tier,
        line_length=line_length,
        signature=signature,
        deprecation_version=deprecation_version,
        fix_past_hook=config.fix_past_hook if fix_past_hook is None else fix_past_hook,
    )
    batch = Batch(
        era, tier, rule_dirs, options, jobs or config.jobs, show_diff, check, report, quiet, verbose,
        color_default() if color is None else color, None if no_cache else default_dir(), default_dir(),
    )  # fmt: skip
    try:
        if stdin:
            from .stdio import migrate_stdin

            excluded = bool(stdin_filename) and force_excluded(Path(stdin_filename), config, patterns)
            sys.exit(migrate_stdin(sys.stdin.buffer.read(), stdin_filename, batch, excluded))
        sys.exit(migrate_files(collect_files(paths, config, patterns, verbose), batch))
    except RuleError as exc:  # a bad rule file, found when the first file needs the engine (nothing written yet)
        fail(str(exc))


@main.command("verify")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--era", default=None, help="API era to target (default: from the installed transformers, or config).")
@click.option("--tier", type=click.Choice(TIERS), default=None, help="How far to migrate (default: dynamic).")
@click.option("--rules", "rules", multiple=True, type=click.Path(path_type=Path), help="Extra rule directory.")
@click.option("--jobs", "-j", type=JOBS, default=None, help="Files migrated in parallel (default: config, or 1).")
@click.option(
    "--line-length", type=LINE_LENGTH, default=None, help="Line length for inserted code (default: pyproject)."
)
@click.option("--report", type=click.Path(path_type=Path), default=None, help="Write a JSON report here.")
@click.option("--quiet", "-q", is_flag=True, help="Only diagnostics, errors and the verdict.")
@click.option("--signature", type=click.Choice(["end", "upstream"]), default="end", help="As for migrate.")
@click.option("--deprecation-version", default=None, help="As for migrate.")
@click.option("--fix-past-hook/--no-fix-past-hook", default=None, help="As for migrate.")
@verify_options
@selection_options
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
    fix_past_hook,
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
    engine_options = dict(signature=signature, deprecation_version=deprecation_version, fix_past_hook=fix_past_hook)
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
    from ..rules.loader import load_ruleset

    era = resolve_era(era or "auto", quiet=True)
    check_rule_dirs(rules)
    try:
        ruleset = load_ruleset(era, tuple(rules))
    except RuleError as exc:
        fail(str(exc))
    chosen = ruleset.for_tier(tier) if tier else ruleset.rules
    for rule in chosen:
        click.echo(f"{rule.id}  {rule.era}  {rule.tier:<8}  {rule.name:<32}  {rule.description}")


@main.command()
@click.argument("original", type=click.Path(exists=True, path_type=Path))
@click.argument("migrated", type=click.Path(exists=True, path_type=Path))
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
@click.option(
    "--config",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Set a config value over the tiny ones, to probe a variant of the model, e.g. --config multi_query=false "
    "(true/false/none, numbers, else text; repeatable).",
)
@click.option(
    "--original-python",
    default=None,
    metavar="PYTHON",
    help="Cross-version probe: run ORIGINAL with this interpreter (a venv where it worked, e.g. transformers 4.51.3).",
)
@click.option(
    "--migrated-python",
    default=None,
    metavar="PYTHON",
    help="Cross-version probe: run MIGRATED with this interpreter (the target runtime, e.g. transformers 5.x).",
)
@click.option("--rtol", type=float, default=None, help="Cross-version probe: relative tolerance (default 1e-5).")
@click.option("--atol", type=float, default=None, help="Cross-version probe: absolute tolerance (default 1e-5).")
def probe(
    original, migrated, checks, static, seed, package, settings, original_python, migrated_python, rtol, atol
) -> None:
    """Compare ORIGINAL and MIGRATED on a tiny random model with shared weights (files, or remote-code folders:
    each folder's modeling_*.py is imported inside the folder as a package, with the modules it imports).

    With --original-python and/or --migrated-python (the other one defaults to this interpreter), each file runs
    in its own runtime with the same state_dict and inputs: logits and cached tensors are compared within a
    tolerance (it is printed), tokens exactly.

    Exit 0: every check passed or was skipped. 1: a check diverged (a difference, or an error of the migrated
    file only). 2: the probe could not be set up, or checks could not run on the original (set-up errors only).
    """
    from ..probe import CHECK_NAMES, exit_status, format_table, run_probe, summary_line
    from ..probe.loading import ProbeSetupError, modeling_file
    from ..probe.report import DIVERGED, SETUP_ERROR, is_setup_failure

    try:  # a folder: a remote-code package, probed through its modeling_*.py (its siblings imported with it)
        original, migrated = modeling_file(original), modeling_file(migrated)
    except ProbeSetupError as exc:
        fail(str(exc))

    start = time.perf_counter()
    if original_python or migrated_python:
        from ..probe.cross import DEFAULT_ATOL, DEFAULT_RTOL, run_cross_probe

        if checks or static is not None:
            fail("--check and --static do not apply to the cross-version probe (it runs all its checks)")
        report = run_cross_probe(
            original,
            migrated,
            original_python=original_python,
            migrated_python=migrated_python,
            package=package,
            seed=seed,
            settings=_config_values(settings),
            rtol=DEFAULT_RTOL if rtol is None else rtol,
            atol=DEFAULT_ATOL if atol is None else atol,
        )
        results = report.results
        if not is_setup_failure(results):
            click.echo(report.header())
    else:
        if rtol is not None or atol is not None:
            fail("--rtol and --atol apply to the cross-version probe (--original-python / --migrated-python)")
        unknown = [c for c in checks if c not in CHECK_NAMES]
        if unknown:
            fail(f"unknown check(s) {', '.join(unknown)}: expected some of {', '.join(CHECK_NAMES)}")
        values = _config_values(settings)
        results = run_probe(
            original, migrated, checks=list(checks) or None, static=static, seed=seed, package=package, settings=values
        )
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


def _config_values(pairs) -> dict:
    """``["multi_query=false", "num_kv_heads=2"]`` -> ``{"multi_query": False, "num_kv_heads": 2}``."""
    import json

    values = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            fail(f"--config {pair!r}: expected KEY=VALUE")
        lowered = text.strip().lower()
        if lowered in ("true", "false", "none", "null"):
            value = {"true": True, "false": False}.get(lowered)
        else:
            try:
                value = json.loads(text)
            except ValueError:
                value = text
        values[key.strip()] = value
    return values


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
