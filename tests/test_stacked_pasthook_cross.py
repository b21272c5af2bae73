"""The stacked style (a past read through `layer_past[0].transpose(-2, -1)`, stacked presents) and the past hook
fixed with --fix-past-hook, migrated and cross-probed against the original (run here, on 4.51.3): every check passes
or is skipped on the target runtime, tuples in give the stacked tensors back, a Cache in comes back as itself, and
generate() gives the original's tokens. About 30 s each; skipped where a runtime's venv is missing."""

import os
import shutil
from pathlib import Path

import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.probe.cross import run_cross_probe
from cachemigrate.probe.report import PASS, SKIP
from cachemigrate.rules.loader import load_ruleset

REMOTE = Path(__file__).resolve().parent.parent / "fixtures" / "remote"
RUNTIMES = {
    "4": Path(os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python")),
    "5": Path(os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python")),
}

pytestmark = pytest.mark.runtimes


@pytest.mark.parametrize(
    "style,era,runtime,fix",
    [
        ("stacked", "5", "5", False),
        ("stacked", "portable", "4", False),
        ("pasthook", "4.56", "4", True),
    ],
)
def test_migrated_style_passes_the_cross_probe(style, era, runtime, fix, tmp_path):
    python = RUNTIMES[runtime]
    if not python.is_file():
        pytest.skip(f"no transformers {runtime}.x interpreter at {python}")
    folder = tmp_path / style
    shutil.copytree(REMOTE / style, folder)
    modeling = folder / f"modeling_{style}.py"
    options = Options(line_length=119, fix_past_hook=fix)
    result = migrate_source(modeling.read_text(), load_ruleset(era), options, path=str(modeling))
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    modeling.write_text(result.migrated)
    report = run_cross_probe(REMOTE / style / modeling.name, modeling, migrated_python=str(python), timeout=300)
    statuses = {r.name: r.status for r in report.results}
    assert report.migrated_transformers and report.migrated_transformers.startswith(runtime), report.header()
    assert set(statuses.values()) <= {PASS, SKIP}, [(r.name, r.status, r.detail) for r in report.results]
    for check in ("logits_no_cache", "tuple_in_tuple_out", "cache_in_same_cache", "generate_greedy", "generate_beam"):
        assert statuses.get(check) == PASS, (check, statuses)
