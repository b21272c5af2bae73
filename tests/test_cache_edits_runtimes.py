"""Code that edits a cache outside a model, on the runtimes its eras are for: the helper modules of
fixtures/cache_edits/ migrated for era 4.56 run on transformers 4.57.6, for era 5 on the newest 5.x, for portable on
both; each migrated helper, handed a DynamicCache of that release, gives bit for bit what the original gives on a
tuple past (cachemigrate/probe/edits.py, one subprocess per runtime). The originals handed the same caches fail on
5.x (the crash users report). Skipped where a runtime's venv is missing."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from cache_edit_calls import CALLS, FIXTURES
from cachemigrate.engine import Options, migrate_source
from cachemigrate.probe import edits
from cachemigrate.rules.loader import load_ruleset

RUNTIMES = {
    "4.57": (
        Path(os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python")),
        ("4.56", "portable"),
    ),
    "5": (Path(os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python")), ("5", "portable")),
}

pytestmark = pytest.mark.runtimes


def _run(python: Path, jobs: list[dict], tmp_path: Path) -> list[dict]:
    spec = tmp_path / "jobs.json"
    spec.write_text(json.dumps(jobs))
    done = subprocess.run([str(python), edits.__file__, str(spec)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_migrated_helpers_on_the_runtimes_cache_match_the_originals_on_a_tuple(runtime, tmp_path):
    python, eras = RUNTIMES[runtime]
    if not python.is_file():
        pytest.skip(f"no transformers {runtime} interpreter at {python}")
    jobs = []
    for era in eras:
        for fixture, calls in sorted(CALLS.items()):
            source = FIXTURES / fixture
            result = migrate_source(source.read_text(), load_ruleset(era), Options(line_length=119), path=str(source))
            assert result.status == "migrated", [str(d) for d in result.diagnostics]
            migrated = tmp_path / f"{era}_{fixture.replace('/', '_')}"
            migrated.write_text(result.migrated)
            jobs.append(
                {"original": str(source), "migrated": str(migrated), "calls": calls, "label": f"{era} {fixture}"}
            )
    if runtime == "5":  # the originals themselves, handed the same caches
        jobs += [
            {"original": str(FIXTURES / f), "migrated": str(FIXTURES / f), "calls": c, "label": f"original {f}"}
            for f, c in sorted(CALLS.items())
        ]
    results = _run(python, jobs, tmp_path)
    assert {r["transformers"].split(".")[0] for r in results if "transformers" in r} <= {runtime.split(".")[0]}
    migrated = [r for r in results if not r["label"].startswith("original")]
    assert len(migrated) == sum(len(c) for c in CALLS.values()) * len(eras)
    assert [(r["label"], r["call"]["function"], r["detail"]) for r in migrated if not r["ok"]] == []
    if runtime == "5":
        originals = [r for r in results if r["label"].startswith("original")]
        failing = {r["label"] for r in originals if not r["ok"]}
        assert failing == {f"original {f}" for f in CALLS}, [(r["label"], r["detail"]) for r in originals]
