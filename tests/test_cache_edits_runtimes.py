"""Code that edits a cache outside a model, on the runtimes its eras are for: the helper modules of
fixtures/cache_edits/ migrated for era 4.56 run on transformers 4.57.6, for era 5 on the newest 5.x, for portable on
both; each migrated helper, handed a DynamicCache of that release, gives bit for bit what the original gives on a
tuple past (cachemigrate/probe/edits.py, one subprocess per runtime). The originals handed the same caches fail on
5.x (the crash users report), and so does the era before's code where the eras differ (`key_cache` on 4.57, a
positive `crop` on 5.x). Skipped where a runtime's venv is missing."""

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
    "4.57": (os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"), ("4.56", "portable")),
    "5": (os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"), ("5", "portable")),
}
# the era before, run on the runtime too: where its code differs, it fails there (why each era has its own rule)
OLDER = {"4.57": "4.52", "5": "4.56"}
FAILS_ON = {
    "4.57": {
        "layer_norms": "no attribute 'key_cache'",
        "evict": "no attribute 'key_cache'",
        "keep_recent": "key_cache",
        "compress": "key_cache",
        "last_layer_means": "key_cache",
    },
    # `crop(5)` is an error from 5.20 on, and `crop(0)` keeps everything where the slice kept nothing
    "5": {"rollback": "", "drop_rejected": "positive value", "verify_step": "positive value"},
}

pytestmark = pytest.mark.runtimes


def _run(python: str, jobs: list[dict], tmp_path: Path) -> list[dict]:
    spec = tmp_path / "jobs.json"
    spec.write_text(json.dumps(jobs))
    done = subprocess.run(
        [python, edits.__file__, str(spec)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _jobs(era: str, label: str, tmp_path: Path) -> list[dict]:
    jobs = []
    for fixture, calls in sorted(CALLS.items()):
        source = FIXTURES / fixture
        result = migrate_source(source.read_text(), load_ruleset(era), Options(line_length=119), path=str(source))
        assert result.status == "migrated", [str(d) for d in result.diagnostics]
        migrated = tmp_path / f"{era}_{fixture.replace('/', '_')}"
        migrated.write_text(result.migrated)
        jobs.append({"original": str(source), "migrated": str(migrated), "calls": calls, "label": label})
    return jobs


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_migrated_helpers_on_the_runtimes_cache_match_the_originals_on_a_tuple(runtime, tmp_path):
    python, eras = RUNTIMES[runtime]
    if not Path(python).is_file():
        pytest.skip(f"no transformers {runtime} interpreter at {python}")
    jobs = [job for era in eras for job in _jobs(era, era, tmp_path)] + _jobs(OLDER[runtime], "older", tmp_path)
    # the originals themselves, handed the same caches
    jobs += [
        {"original": str(FIXTURES / f), "migrated": str(FIXTURES / f), "calls": c, "label": "original"}
        for f, c in sorted(CALLS.items())
    ]
    results = _run(python, jobs, tmp_path)
    assert {r["transformers"][: len(runtime)] for r in results if "transformers" in r} == {runtime}
    migrated = [r for r in results if r["label"] in eras]
    assert len(migrated) == sum(len(c) for c in CALLS.values()) * len(eras)
    assert [(r["label"], r["call"]["function"], r["detail"]) for r in migrated if not r["ok"]] == []
    failing = {r["call"]["function"] for r in results if r["label"] == "original" and not r["ok"]}
    if runtime == "5":  # every helper fails as users report it (not subscriptable, 3-tuples to unpack), but the
        # one that only counts the layers: `len` of a Cache is its number of layers
        assert failing == {call["function"] for calls in CALLS.values() for call in calls} - {"should_verify"}
    older = {(r["call"]["function"], r["detail"]) for r in results if r["label"] == "older" and not r["ok"]}
    assert {function for function, _ in older} == set(FAILS_ON[runtime]), older
    assert all(FAILS_ON[runtime][function] in detail for function, detail in older), older
