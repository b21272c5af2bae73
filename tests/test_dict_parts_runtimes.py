"""CM640 on the runtimes its eras are for: the toy translator of ``fixtures/<era>/CM640`` (a past of dicts of parts,
fairseq style) migrated for 4.52 runs on transformers 4.51.3, for 4.56 on 4.57.6, for 5 on the newest 5.x, and for
portable on all three (``tests/dict_parts_driver.py``, one subprocess each): the same logits as the original on
its lists of dicts, lists of dicts given back where they came in, an EncoderDecoderCache given back as the same
object with the cross part written once, beams reordered both ways. Skipped where a runtime's venv is missing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DRIVER = Path(__file__).resolve().parent / "dict_parts_driver.py"
PYTHONS = {
    "4.51": sys.executable,
    "4.57": os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"),
    "5": os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"),
}
RUNS = [
    ("4.52", "4.51"),
    ("4.56", "4.57"),
    ("5", "5"),
    ("portable", "4.51"),
    ("portable", "4.57"),
    ("portable", "5"),
]

pytestmark = pytest.mark.runtimes


def _version(python: str) -> str | None:
    if not Path(python).exists():
        return None
    done = subprocess.run(
        [python, "-c", "import transformers; print(transformers.__version__)"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else None


@pytest.mark.parametrize("era, runtime", RUNS, ids=[f"{era}-on-{runtime}" for era, runtime in RUNS])
def test_the_migrated_translator_decodes_as_the_original(era, runtime):
    python = PYTHONS[runtime]
    version = _version(python)
    if version is None or not version.startswith(runtime):
        pytest.skip(f"no transformers {runtime} at {python} (found {version})")
    folder = REPO / "fixtures" / era / "CM640"
    done = subprocess.run(
        [python, str(DRIVER), str(folder / "before.py"), str(folder / "after.py")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["max_diff"] == 0.0
    assert (said["self_length"], said["cross_length"]) == (6, 5)  # one token a step; the source written once
    assert said["is_updated"] == {"0": True, "1": True}
