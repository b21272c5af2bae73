"""cachemigrate installed the way users install it: a wheel in a fresh virtualenv (no editable install, no torch,
no transformers, no checkout on the path) finds its built-in rules and runs every subcommand: migrate, verify,
probe (its runtimes are other interpreters: this one, with torch and transformers) and rules.

The wheel is built from a copy of the sources (nothing is written into the checkout); the virtualenv gets the wheel
and its runtime dependencies from the package index pip is set up with, as ``pip install cachemigrate`` would."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BEFORE = REPO / "fixtures" / "4.52" / "full" / "before.py"

pytestmark = pytest.mark.packaging


def _run(*command, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, env=env, timeout=600, **kwargs)
    assert result.returncode == 0, f"{command}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def _can_build_here() -> bool:
    """This environment's setuptools builds wheels itself (70.1 and later, or with the ``wheel`` package): a
    venv made by Python 3.11 has setuptools 65 and no ``wheel``."""
    if importlib.util.find_spec("setuptools") is None:
        return False
    import setuptools

    version = tuple(int(part) for part in setuptools.__version__.split(".")[:2] if part.isdigit())
    return version >= (70, 1) or importlib.util.find_spec("wheel") is not None


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copyfile(REPO / name, source / name)
    for name in ("cachemigrate", "rules"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    isolation = ["--no-build-isolation"] if _can_build_here() else []  # else pip gets setuptools from the index
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", dist, source)
    [built] = dist.glob("cachemigrate-*.whl")
    return built


@pytest.fixture(scope="session")
def venv(wheel, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("venv")
    _run(sys.executable, "-m", "venv", root)
    _run(root / "bin" / "python", "-m", "pip", "install", "-q", wheel)
    return root


def test_the_wheel_ships_the_rules(wheel):
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    shipped = sorted(n for n in names if n.startswith("cachemigrate/builtin_rules/"))
    in_repo = sorted(f"cachemigrate/builtin_rules/{p.relative_to(REPO / 'rules').as_posix()}"
                     for p in [*(REPO / "rules").rglob("*.toml"), *(REPO / "rules" / "vendor").glob("*.py")])  # fmt: skip
    assert shipped == in_repo and "cachemigrate/builtin_rules/4.52/era.toml" in shipped


def test_a_wheel_install_migrates_a_file(venv, tmp_path):
    python = venv / "bin" / "python"
    where = _run(python, "-c", "import cachemigrate, importlib.util as u; print(cachemigrate.__file__); "
                 "print(u.find_spec('torch'), u.find_spec('transformers'))", cwd=tmp_path).stdout  # fmt: skip
    assert where.splitlines() == [str(venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
                                      / "site-packages" / "cachemigrate" / "__init__.py"), "None None"]  # fmt: skip
    target = tmp_path / "modeling_pebble.py"
    shutil.copyfile(BEFORE, target)
    diff = _run(venv / "bin" / "cachemigrate", "migrate", "--era", "4.52", "--diff", target, cwd=tmp_path).stdout
    assert "\n+            k, v = layer_past.update(k, v, self.layer_idx)\n" in diff
    assert target.read_bytes() == BEFORE.read_bytes()
    # without --era: transformers is not installed there, so the portable target is taken
    result = _run(venv / "bin" / "cachemigrate", "migrate", target, cwd=tmp_path)
    assert result.stderr.startswith("era portable (transformers is not installed"), result.stderr
    assert b"DynamicCache" in target.read_bytes()
    rules = _run(venv / "bin" / "cachemigrate", "rules", "--era", "4.52", cwd=tmp_path).stdout
    shipped = {line.split()[0] for line in rules.splitlines()}
    in_the_checkout = {path.stem for path in (REPO / "rules" / "4.52").glob("CM*.toml")}
    assert shipped == in_the_checkout  # every built-in rule is in the wheel


def test_the_wheel_has_every_package_of_the_checkout(wheel):
    """Packages are found, not listed: a subpackage added to cachemigrate/ ships without naming it anywhere."""
    import zipfile

    shipped = {name.rsplit("/", 1)[0] for name in zipfile.ZipFile(wheel).namelist() if name.endswith("/__init__.py")}
    in_repo = {p.parent.relative_to(REPO).as_posix() for p in (REPO / "cachemigrate").rglob("__init__.py")}
    assert in_repo and in_repo <= shipped


def test_a_wheel_install_verifies_and_probes(venv, tmp_path):
    """verify and probe from the wheel: the fork's tests are a command of the user's, the probe's two sides run
    in an interpreter that has torch and transformers (this one), with the wheel's own probe package."""
    fork = tmp_path / "fork"
    shutil.copytree(REPO / "fixtures" / "tinyfork" / "tinyfork", fork / "tinyfork")
    (fork / "pyproject.toml").write_text('[tool.cachemigrate]\nera = "4.52"\n')
    (fork / "tests").mkdir()
    shutil.copytree(fork / "tinyfork", tmp_path / "original" / "tinyfork")  # its package, for relative imports
    original = tmp_path / "original" / "tinyfork" / "modeling_tinyfork.py"
    tests = f"{venv / 'bin' / 'python'} -c pass"
    verified = _run(venv / "bin" / "cachemigrate", "verify", fork, "--tests", tests, cwd=tmp_path)
    migrated = fork / "tinyfork" / "modeling_tinyfork.py"
    assert migrated.read_bytes() != original.read_bytes(), verified.stderr
    assert b"DynamicCache" in migrated.read_bytes()
    probed = _run(venv / "bin" / "cachemigrate", "probe", original, migrated, "--original-python", sys.executable,
                  "--migrated-python", sys.executable, cwd=tmp_path)  # fmt: skip
    assert re.search(r"probe: [1-9]\d* passed, \d+ skipped, 0 diverged", probed.stdout), probed.stdout


def test_the_wheel_ships_its_built_in_rules_checked(wheel, venv, tmp_path):
    """The build checked every built-in era and ships the record: the first run after the install, with an empty
    cache and with --no-cache alike, answers a clean file without loading the rules (libcst is never imported),
    and records nothing of its own."""
    import zipfile

    assert "cachemigrate/rules/checked.json" in zipfile.ZipFile(wheel).namelist()
    clean = tmp_path / "modeling_clean.py"
    clean.write_text("import torch\n\n\ndef f(x):\n    return x\n")
    code = (
        "import sys\nfrom cachemigrate.cli.main import main\n"
        "try:\n    main(['migrate', *sys.argv[1:]])\n"
        "except SystemExit as exc:\n    print(exc.code, 'libcst' in sys.modules)"
    )
    for era in sorted(path.parent.name for path in (REPO / "rules").glob("*/era.toml")):
        for cache in ([], ["--no-cache"]):
            out = _run(venv / "bin" / "python", "-c", code, "--era", era, "--check", *cache, clean, cwd=tmp_path)
            assert out.stdout.split()[-2:] == ["0", "False"], (era, cache, out.stderr)
    assert not (Path(os.environ["CACHEMIGRATE_CACHE_DIR"]) / "checked-rules").exists()
