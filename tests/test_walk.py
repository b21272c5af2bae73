"""Which files a run takes (cachemigrate.source.walk), directly and through ``cachemigrate migrate``."""

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from cachemigrate.cli.main import main
from cachemigrate.source.walk import Selection, collect, find_root

PLAIN = "x = 1\n"  # nothing to migrate: only which files are taken matters


def make(root: Path, *names: str, text: str = PLAIN) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def taken(root: Path, *paths, selection=Selection()) -> set[str]:
    return {Path(os.path.abspath(p)).relative_to(root).as_posix() for p in collect(list(paths), selection)}


@pytest.fixture
def project(tmp_path):
    """A project as a README user has it: the package, a .venv with transformers in it, caches, a .gitignore."""
    (tmp_path / ".git").mkdir()
    make(
        tmp_path,
        "fork/modeling_fork.py",
        "fork/sub/modeling_sub.py",
        "fork/configuration_fork.py",
        "fork/modeling_tf_fork.py",
        "fork/modeling_flax_fork.py",
        ".venv/lib/python3.11/site-packages/transformers/models/gpt2/modeling_gpt2.py",
        "env/lib/python3.11/site-packages/transformers/models/gpt2/modeling_gpt2.py",
        "conda/lib/python3.11/modeling_conda.py",
        ".tox/py311/modeling_tox.py",
        "fork/__pycache__/modeling_fork.py",
        "node_modules/x/modeling_js.py",
        "out/modeling_out.py",
        "build/lib/fork/modeling_fork.py",
        "fork/generated/modeling_gen.py",
        "fork/generated/modeling_keep.py",
    )
    (tmp_path / "env" / "pyvenv.cfg").write_text("home = /usr/bin\n")  # a virtualenv whatever its name
    (tmp_path / "conda" / "conda-meta").mkdir()
    (tmp_path / ".gitignore").write_text("/out/\nbuild/\n")
    (tmp_path / "fork" / "generated" / ".gitignore").write_text("*.py\n!modeling_keep.py\n")
    return tmp_path


def test_a_walk_skips_virtualenvs_hidden_and_ignored_folders_and_tf_flax_files(project):
    assert taken(project, project) == {
        "fork/modeling_fork.py",
        "fork/sub/modeling_sub.py",
        "fork/generated/modeling_keep.py",
    }


def test_the_readme_flow_migrate_dot_does_not_touch_the_venv(project, monkeypatch):
    venv_file = project / ".venv/lib/python3.11/site-packages/transformers/models/gpt2/modeling_gpt2.py"
    legacy = (Path(__file__).resolve().parent.parent / "fixtures" / "4.52" / "full" / "before.py").read_bytes()
    venv_file.write_bytes(legacy)
    monkeypatch.chdir(project)
    result = CliRunner().invoke(main, ["migrate", "--era", "4.52", "--report", "r.json", "."])
    assert result.exit_code == 0, result.output
    files = {f["path"] for f in json.loads((project / "r.json").read_text())["files"]}
    assert files == {"fork/modeling_fork.py", "fork/sub/modeling_sub.py", "fork/generated/modeling_keep.py"}
    assert venv_file.read_bytes() == legacy


def test_a_folder_named_explicitly_is_walked_even_inside_a_venv_or_ignored(project):
    models = project / ".venv/lib/python3.11/site-packages/transformers/models"
    assert taken(project, models) == {".venv/lib/python3.11/site-packages/transformers/models/gpt2/modeling_gpt2.py"}
    assert taken(project, project / "out") == {"out/modeling_out.py"}  # /out/ is git-ignored at the root
    assert taken(project, project / "fork" / "generated") == {"fork/generated/modeling_keep.py"}


def test_files_named_explicitly_are_always_taken_unless_force_excluded(project):
    tf = project / "fork" / "modeling_tf_fork.py"
    ignored = project / "out" / "modeling_out.py"
    config = project / "fork" / "configuration_fork.py"
    assert taken(project, tf, ignored, config) == {
        "fork/modeling_tf_fork.py",
        "out/modeling_out.py",
        "fork/configuration_fork.py",
    }
    forced = Selection(force_exclude=("modeling_tf_*.py", "/out/"))
    assert taken(project, tf, ignored, config, selection=forced) == {"fork/configuration_fork.py"}
    # force-exclude applies in walks too
    assert "fork/sub/modeling_sub.py" not in taken(project, project, selection=Selection(force_exclude=("sub/",)))


def test_include_exclude_and_extend_exclude_are_gitignore_style_patterns(project):
    fork = project / "fork"
    assert taken(project, fork, selection=Selection(include=("configuration_*.py",))) == {"fork/configuration_fork.py"}
    # --exclude replaces the default, so TF and Flax files come back; a folder pattern leaves a folder out
    assert taken(project, fork, selection=Selection(exclude=("sub/",))) == {
        "fork/modeling_fork.py",
        "fork/modeling_tf_fork.py",
        "fork/modeling_flax_fork.py",
        "fork/generated/modeling_keep.py",
    }
    # --extend-exclude adds to the default; a leading / anchors a pattern at the project root
    assert taken(project, fork, selection=Selection(extend_exclude=("/fork/modeling_fork.py",))) == {
        "fork/sub/modeling_sub.py",
        "fork/generated/modeling_keep.py",
    }
    assert taken(project, fork, selection=Selection(extend_exclude=("/modeling_fork.py",))) == {
        "fork/modeling_fork.py",  # anchored at the root, not at fork/
        "fork/sub/modeling_sub.py",
        "fork/generated/modeling_keep.py",
    }


def test_symlinks_a_linked_file_is_taken_once_links_out_of_the_folder_and_folder_links_are_not_followed(
    project, tmp_path_factory
):
    outside = tmp_path_factory.mktemp("outside")
    make(outside, "modeling_outside.py")
    fork = project / "fork"
    (fork / "modeling_alias.py").symlink_to(fork / "modeling_fork.py")
    (fork / "modeling_out.py").symlink_to(outside / "modeling_outside.py")
    (fork / "linked_dir").symlink_to(outside, target_is_directory=True)
    found = collect([fork])
    assert len(found) == len({os.path.realpath(p) for p in found})  # the linked file once
    names = {p.name for p in found}
    assert names & {"modeling_alias.py", "modeling_fork.py"} and not names & {"modeling_out.py", "modeling_outside.py"}


def test_paths_are_given_back_as_named(project, monkeypatch):
    monkeypatch.chdir(project)
    assert [str(p) for p in collect([Path("fork/sub")])] == ["fork/sub/modeling_sub.py"]


def test_find_root_is_the_nearest_folder_with_git_hg_or_pyproject(project):
    assert find_root([project / "fork" / "sub"]) == project
    (project / "fork" / "pyproject.toml").write_text("")
    assert find_root([project / "fork" / "sub" / "modeling_sub.py"]) == project / "fork"


# ------------------------------------------------------------------------------------------------------------------
# The same through the command line and [tool.cachemigrate]
# ------------------------------------------------------------------------------------------------------------------


def report_of(root: Path, *args) -> set[str]:
    result = CliRunner().invoke(main, ["migrate", "--era", "4.52", "--report", str(root / "r.json"), *map(str, args)])
    assert result.exit_code == 0, result.output
    return {Path(f["path"]).relative_to(root).as_posix() for f in json.loads((root / "r.json").read_text())["files"]}


def test_cli_patterns_replace_the_config_patterns(project):
    (project / "pyproject.toml").write_text('[tool.cachemigrate]\nexclude = ["sub/"]\nextend-exclude = ["gen*/"]\n')
    fork = project / "fork"
    assert report_of(project, fork) == {
        "fork/modeling_fork.py",
        "fork/modeling_tf_fork.py",
        "fork/modeling_flax_fork.py",
    }
    assert report_of(project, "--exclude", "modeling_*_fork.py", fork) == {
        "fork/modeling_fork.py",
        "fork/sub/modeling_sub.py",
    }
    assert report_of(project, "--extend-exclude", "modeling_flax_*.py", "--exclude", "sub/", fork) == {
        "fork/modeling_fork.py",
        "fork/modeling_tf_fork.py",
        "fork/generated/modeling_keep.py",
    }
    assert report_of(project, "--include", "configuration_*.py", fork) == {"fork/configuration_fork.py"}


def test_force_exclude_in_config_and_on_the_command_line_for_named_files(project):
    """pre-commit names every file: ``--force-exclude`` (as in ruff, and black's force-exclude) makes the excludes
    apply to them too; ``force-exclude = true`` does so from the config; a list of patterns always applies."""
    tf, plain = project / "fork" / "modeling_tf_fork.py", project / "fork" / "modeling_fork.py"
    sub = project / "fork" / "sub" / "modeling_sub.py"
    assert report_of(project, tf, plain) == {"fork/modeling_tf_fork.py", "fork/modeling_fork.py"}
    # the default exclude (modeling_tf_*.py, modeling_flax_*.py), for named files too
    assert report_of(project, "--force-exclude", tf, plain) == {"fork/modeling_fork.py"}
    (project / "pyproject.toml").write_text('[tool.cachemigrate]\nextend-exclude = ["sub/"]\n')
    assert report_of(project, "--force-exclude", tf, plain, sub) == {"fork/modeling_fork.py"}
    assert report_of(project, tf, sub) == {"fork/modeling_tf_fork.py", "fork/sub/modeling_sub.py"}
    (project / "pyproject.toml").write_text('[tool.cachemigrate]\nforce-exclude = true\nexclude = ["sub/"]\n')
    assert report_of(project, tf, sub) == {"fork/modeling_tf_fork.py"}
    assert report_of(project, "--no-force-exclude", tf, sub) == {
        "fork/modeling_tf_fork.py",
        "fork/sub/modeling_sub.py",
    }
    (project / "pyproject.toml").write_text('[tool.cachemigrate]\nforce-exclude = ["/fork/modeling_fork.py"]\n')
    assert report_of(project, tf, plain) == {"fork/modeling_tf_fork.py"}


def test_a_bad_pattern_list_in_config_exits_2(project):
    (project / "pyproject.toml").write_text("[tool.cachemigrate]\nforce-exclude = [1]\n")
    result = CliRunner().invoke(main, ["migrate", "--era", "4.52", str(project)])
    assert result.exit_code == 2
    assert "key `force-exclude`: expected true (apply the excludes" in result.stderr and "got [1]" in result.stderr


def test_a_symlink_loop_is_reported_and_the_walk_goes_on(tmp_path):
    make(tmp_path, "fork/modeling_fine.py", "fork/sub/modeling_deep.py")
    fork = tmp_path / "fork"
    (fork / "modeling_loop.py").symlink_to(fork / "modeling_back.py")
    (fork / "modeling_back.py").symlink_to(fork / "modeling_loop.py")
    (fork / "sub" / "spin").symlink_to(fork / "sub" / "spin")  # a link to itself
    result = CliRunner().invoke(main, ["migrate", "--era", "4.52", "--report", str(tmp_path / "r.json"), str(fork)])
    assert result.exit_code == 0, result.output
    files = {
        Path(f["path"]).relative_to(fork).as_posix() for f in json.loads((tmp_path / "r.json").read_text())["files"]
    }
    assert files == {"modeling_fine.py", "sub/modeling_deep.py"}
    for name in ("modeling_loop.py", "modeling_back.py", "sub/spin"):
        assert f"warning: {fork / name}: a symlink loop (" in result.stderr, result.stderr


def test_a_symlinked_modeling_file_left_out_of_a_walk_is_said_with_v(tmp_path):
    make(tmp_path, "fork/modeling_fine.py", "elsewhere/modeling_far.py")
    (tmp_path / "fork" / "modeling_link.py").symlink_to(tmp_path / "elsewhere" / "modeling_far.py")
    plain = CliRunner().invoke(main, ["migrate", "--era", "4.52", str(tmp_path / "fork")])
    verbose = CliRunner().invoke(main, ["migrate", "--era", "4.52", "-v", str(tmp_path / "fork")])
    assert plain.exit_code == verbose.exit_code == 0, verbose.output
    said = f"note: {tmp_path / 'fork' / 'modeling_link.py'}: a symlink to {tmp_path / 'elsewhere' / 'modeling_far.py'}"
    assert said not in plain.stderr and said in verbose.stderr, verbose.stderr
    assert "outside the walked folder: skipped (name it to migrate it)" in verbose.stderr


def test_a_folder_with_no_matching_file_says_so_and_how_to_widen_the_patterns(tmp_path):
    make(tmp_path / "fork", "m1.py", "m2.py")  # a fork whose files are not named modeling_*.py
    result = CliRunner().invoke(main, ["migrate", "--era", "4.52", "--check", str(tmp_path / "fork")])
    assert result.exit_code == 0, result.output
    assert "no file in" in result.output and "modeling_*.py" in result.output and "--include" in result.output
    named = CliRunner().invoke(main, ["migrate", "--era", "4.52", "--check", "--include", "m*.py", str(tmp_path / "fork")])
    assert "no file in" not in named.output
