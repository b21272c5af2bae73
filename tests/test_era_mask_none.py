"""A cached step with ``attention_mask=None`` on each era's runtime: the migrated file must read the past length
from the cache (5.x drops an all-ones mask to None, so this is the path its generate() takes), and its logits must
match the no-cache logits of the whole sequence. Each file is migrated here and run under the runtime's interpreter
(tests/mask_none_step.py): 4.52 on this one (4.51.3), 4.56 on 4.57.6, 5 on 5.x, portable on all three; skipped
where a runtime venv is missing (bench/runtimes.py builds them; .ci/run does so in CI).

Files, written for this repository: the bundled tinyfork (its past length from the past's keys), and a
Llama-style toy (fixtures/pastlen) that builds its 4-D mask and positions from ``past_key_values_length``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset

REPO = Path(__file__).resolve().parent.parent
FILES = {
    "tinyfork": REPO / "fixtures" / "tinyfork" / "tinyfork" / "modeling_tinyfork.py",
    "pastlen": REPO / "fixtures" / "pastlen" / "pastlen" / "modeling_pastlen.py",
}
RUNTIMES = {
    "4.51": sys.executable,
    "4.57": os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"),
    "5": os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"),
}
CASES = [("4.52", "4.51"), ("4.56", "4.57"), ("5", "5"), ("portable", "4.51"), ("portable", "4.57"), ("portable", "5")]
TOLERANCE = 1e-5

pytestmark = pytest.mark.runtimes


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    """{(file, era): the migrated file, in a copy of its package}."""
    done = {}
    for name, source in FILES.items():
        for era in sorted({era for era, _ in CASES}):
            folder = tmp_path_factory.mktemp(f"{name}-{era}") / source.parent.name
            shutil.copytree(source.parent, folder)
            target = folder / source.name
            result = migrate_source(source.read_text(), load_ruleset(era), Options(line_length=119), path=str(source))
            assert result.status == "migrated", (name, era, [str(d) for d in result.diagnostics])
            target.write_text(result.migrated)
            done[name, era] = target
    return done


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_a_cached_step_without_a_mask_matches_the_no_cache_logits(migrated, runtime):
    python = RUNTIMES[runtime]
    if not Path(python).is_file():
        pytest.skip(f"no transformers {runtime} interpreter at {python}")
    cases = [(name, era) for name in sorted(FILES) for era, where in CASES if where == runtime]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.setdefault("OMP_NUM_THREADS", "1")
    command = [python, str(REPO / "tests" / "mask_none_step.py"), *(str(migrated[case]) for case in cases)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(found) == len(cases)
    for case, result in zip(cases, found):
        assert result["transformers"].startswith(runtime), result
        for start in ("returned", "DynamicCache"):
            assert result[start]["max_abs_diff"] <= TOLERANCE, (case, runtime, start, result)
