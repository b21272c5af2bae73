"""End to end on another runtime: the bundled tinyfork migrated for era 5 matches the original (run here, on
transformers 4.51.3) when the migrated file runs on transformers 5.24 (the cross-version probe). About 30 s; skipped
where the venv of 5.24 (/work/venvs/tf524, or $CACHEMIGRATE_TF5_PYTHON) is missing."""

import os
import shutil
from pathlib import Path

import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.probe.cross import run_cross_probe
from cachemigrate.probe.report import PASS, SKIP
from cachemigrate.rules.loader import load_ruleset

REPO = Path(__file__).resolve().parent.parent
TINYFORK = REPO / "fixtures" / "tinyfork" / "tinyfork"
PYTHON = Path(os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf524/bin/python"))

pytestmark = [
    pytest.mark.runtimes,
    pytest.mark.skipif(not PYTHON.is_file(), reason=f"no transformers 5.x interpreter at {PYTHON}"),
]


def test_tinyfork_migrated_for_era_5_matches_the_original_on_transformers_5(tmp_path):
    package = tmp_path / "tinyfork"
    shutil.copytree(TINYFORK, package)
    modeling = package / "modeling_tinyfork.py"
    result = migrate_source(modeling.read_text(), load_ruleset("5"), Options(line_length=119), path=str(modeling))
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    modeling.write_text(result.migrated)
    report = run_cross_probe(TINYFORK / "modeling_tinyfork.py", modeling, migrated_python=str(PYTHON), timeout=300)
    statuses = {r.name: r.status for r in report.results}
    assert report.migrated_transformers and report.migrated_transformers.startswith("5."), report.header()
    assert set(statuses.values()) <= {PASS, SKIP}, [(r.name, r.status, r.detail) for r in report.results]
    for check in ("logits_no_cache", "tuple_in_tuple_out", "cache_in_same_cache", "generate_greedy", "generate_beam"):
        assert statuses.get(check) == PASS, (check, statuses)
