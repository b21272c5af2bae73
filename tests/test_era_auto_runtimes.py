"""`--era auto` on each runtime: the era the command line picks is read from the package metadata of the
interpreter's own transformers (never by importing it). Run by the interpreter of each test venv (4.50, 4.51.3,
4.57.6, 5.x; skipped where one is missing), and once through the command line itself on this one. Well under a
second per runtime: only tomllib and importlib.metadata are imported."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# (interpreter, the release it is meant to hold, the era for it)
RUNTIMES = [
    (os.environ.get("CACHEMIGRATE_TF450_PYTHON", "/work/venvs/tf450/bin/python"), "4.50.", "4.52"),
    (sys.executable, "4.51.", "4.52"),
    (os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"), "4.57.", "4.56"),
    (os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf524/bin/python"), "5.", "5"),
]
READ = (
    "import json, sys; from cachemigrate.rules.eras import era_for_installed; "
    "print(json.dumps([*era_for_installed(), 'transformers' in sys.modules]))"
)

pytestmark = pytest.mark.runtimes


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


@pytest.mark.parametrize("python, release, era", RUNTIMES, ids=[r[1].rstrip(".") for r in RUNTIMES])
def test_the_era_reader_picks_the_era_of_the_runtime_it_runs_in(python, release, era):
    if not Path(python).is_file():
        pytest.skip(f"no interpreter at {python}")
    done = subprocess.run([python, "-c", READ], capture_output=True, text=True, env=_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    chosen, version, imported = json.loads(done.stdout)
    if not (version or "").startswith(release):
        pytest.skip(f"{python} holds transformers {version}, not {release}x")
    assert chosen == era, (python, version)
    assert not imported


def test_the_command_line_says_which_era_it_chose_and_why(tmp_path):
    from importlib import metadata

    version = metadata.version("transformers")
    if not version.startswith("4.51."):
        pytest.skip(f"this interpreter holds transformers {version}, not 4.51.x")
    source = tmp_path / "modeling_clean.py"
    source.write_text("def f(x):\n    return x\n")
    done = subprocess.run(
        [sys.executable, "-m", "cachemigrate.cli.main", "migrate", "--check", "--no-cache", str(source)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"era 4.52 (transformers {version} is installed)" in done.stderr
