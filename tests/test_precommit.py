"""The pre-commit hooks as a user runs them: the real ``pre-commit try-repo`` against a committed copy of this
checkout, in a fresh git repository holding a legacy modeling file, a clean one, one the rules cannot migrate, and
files the hooks must not take (a TensorFlow model, a test file).

pre-commit installs the hook's own virtualenv from the copy (``pip install .``: libcst, black, click, pathspec,
tqdm; never torch) from the package index pip is set up with. PRE_COMMIT_HOME and the result cache live in the
test's temporary folder."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
BEFORE = FIXTURES / "4.52" / "full" / "before.py"
AFTER = FIXTURES / "4.52" / "full" / "after.py"
WEIRD = FIXTURES / "unknown_idiom" / "modeling_weird.py"
PRE_COMMIT = shutil.which("pre-commit", path=str(Path(sys.executable).parent)) or shutil.which("pre-commit")

pytestmark = pytest.mark.skipif(PRE_COMMIT is None, reason="pre-commit is not installed (it is in the test extra)")


def _git(folder: Path, *args: str) -> None:
    identity = ["-c", "user.name=cachemigrate tests", "-c", "user.email=tests@cachemigrate.invalid"]
    subprocess.run(["git", *identity, *args], cwd=folder, check=True, capture_output=True)


def _commit_all(folder: Path, message: str) -> None:
    _git(folder, "add", "-A")
    _git(folder, "commit", "-q", "-m", message)


@pytest.fixture
def hook_repo(tmp_path) -> Path:
    """This checkout as pre-commit fetches it: a git repository with the hook manifest, committed."""
    copy = tmp_path / "cachemigrate"
    copy.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", ".pre-commit-hooks.yaml"):
        shutil.copyfile(REPO / name, copy / name)
    for name in ("cachemigrate", "rules"):
        shutil.copytree(REPO / name, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    _git(copy, "init", "-q")
    _commit_all(copy, "the checkout under test")
    return copy


@pytest.fixture
def project(tmp_path) -> Path:
    project = tmp_path / "fork"
    (project / "fork").mkdir(parents=True)
    (project / "tests").mkdir()
    # the fixtures' line length; the era, as a project using the hook sets it: the hook's own virtualenv has no
    # transformers to choose it from (the portable target would be taken)
    (project / "pyproject.toml").write_text('[tool.black]\nline-length = 119\n\n[tool.cachemigrate]\nera = "4.52"\n')
    shutil.copyfile(BEFORE, project / "fork" / "modeling_pebble.py")
    shutil.copyfile(AFTER, project / "fork" / "modeling_done.py")
    shutil.copyfile(WEIRD, project / "fork" / "modeling_weird.py")
    shutil.copyfile(BEFORE, project / "fork" / "modeling_tf_pebble.py")  # legacy too, but not a torch model
    shutil.copyfile(BEFORE, project / "tests" / "test_modeling_pebble.py")  # nor is a test file
    _git(project, "init", "-q")
    _commit_all(project, "a fork")
    return project


def _pre_commit(project: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    clean["PRE_COMMIT_HOME"] = str(project.parent / "pre-commit-home")
    clean["PRE_COMMIT_COLOR"] = "never"
    return subprocess.run(
        [PRE_COMMIT, *args], cwd=project, env={**clean, **(env or {})}, capture_output=True, text=True, timeout=900
    )


def _try_repo(project: Path, hook_repo: Path, *hook: str) -> subprocess.CompletedProcess:
    return _pre_commit(project, "try-repo", str(hook_repo), *hook, "--all-files")


def _readme_snippet() -> str:
    """The pre-commit configuration the README prints, exactly as printed."""
    text = (REPO / "README.md").read_text()
    [snippet] = re.findall(r"```yaml\n(repos:\n.*?)```", text, flags=re.DOTALL)
    return snippet


def test_the_readme_snippet_works_as_printed(project, tmp_path):
    """The fork's .pre-commit-config.yaml is the README's snippet, byte for byte; `cachemigrate` is the one
    installed where pre-commit runs (here: this checkout, through a launcher on PATH)."""
    snippet = _readme_snippet()
    manifest = {hook["id"]: hook for hook in yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())}
    [hook] = yaml.safe_load(snippet)["repos"][0]["hooks"]
    shipped = manifest[hook["id"]]
    assert {k: hook[k] for k in ("entry", "files", "exclude", "types")} == {
        k: shipped[k] for k in ("entry", "files", "exclude", "types")
    }  # the snippet runs what the published hook runs
    (project / ".pre-commit-config.yaml").write_text(snippet)
    _commit_all(project, "the hook, as the README prints it")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    launcher = bin_dir / "cachemigrate"
    launcher.write_text(f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" -m cachemigrate.cli.main "$@"\n')
    launcher.chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}

    check = _pre_commit(project, "run", "--all-files", env=env)
    output = check.stdout + check.stderr
    assert check.returncode == 1, output
    assert "--- a/fork/modeling_pebble.py\n+++ b/fork/modeling_pebble.py\n" in output
    assert "modeling_tf_pebble" not in output and "test_modeling_pebble" not in output
    assert (project / "fork" / "modeling_pebble.py").read_bytes() == BEFORE.read_bytes()


@pytest.mark.packaging
def test_check_fails_with_the_diff_and_diagnostics_fix_writes_and_then_both_pass(project, hook_repo):
    fork = project / "fork"
    untouched = {
        p: p.read_bytes() for p in (fork / "modeling_tf_pebble.py", project / "tests" / "test_modeling_pebble.py")
    }

    check = _try_repo(project, hook_repo, "cachemigrate-check")
    output = check.stdout + check.stderr
    assert check.returncode == 1, output
    assert "cachemigrate --check" in output and "Failed" in output
    assert "--- a/fork/modeling_pebble.py\n+++ b/fork/modeling_pebble.py\n" in output  # the diff it would make
    assert "+            k, v = layer_past.update(k, v, self.layer_idx)\n" in output
    assert "fork/modeling_weird.py:" in output and ": CM900 `layer_past` is used as a tuple cache" in output
    assert "modeling_done.py" not in output  # clean: nothing printed for it
    assert "modeling_tf_pebble" not in output and "test_modeling_pebble" not in output  # not taken at all
    assert (fork / "modeling_pebble.py").read_bytes() == BEFORE.read_bytes()  # the check writes nothing

    fix = _try_repo(project, hook_repo, "cachemigrate")
    output = fix.stdout + fix.stderr
    assert fix.returncode == 1, output  # files were modified (and one cannot be migrated)
    assert (fork / "modeling_pebble.py").read_bytes() == AFTER.read_bytes()
    assert (fork / "modeling_weird.py").read_bytes() == WEIRD.read_bytes()
    assert all(path.read_bytes() == data for path, data in untouched.items())

    # the user stages the migration and marks the file the rules cannot migrate; then every hook passes
    weird = (fork / "modeling_weird.py").read_text()
    (fork / "modeling_weird.py").write_text("# cachemigrate: skip (migrated by hand later)\n" + weird)
    _commit_all(project, "migrated")
    again = _try_repo(project, hook_repo)
    output = again.stdout + again.stderr
    assert again.returncode == 0, output
    assert output.count("Passed") == 2, output
    assert (fork / "modeling_pebble.py").read_bytes() == AFTER.read_bytes()
