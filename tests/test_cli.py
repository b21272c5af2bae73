"""The command line (``cachemigrate migrate`` and ``cachemigrate rules``) on temporary copies of the fixtures.

Each project directory gets a pyproject.toml with the line length the fixtures were written for (119), so that the
output of the CLI is exactly fixtures/4.52/full/after.py."""

import json
import shutil
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from cachemigrate.cli.main import main
from conftest import summary_of
from cachemigrate.rules.loader import load_ruleset

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BEFORE = FIXTURES / "4.52" / "full" / "before.py"
AFTER = FIXTURES / "4.52" / "full" / "after.py"
WEIRD = FIXTURES / "unknown_idiom" / "modeling_weird.py"
PYPROJECT = "[tool.black]\nline-length = 119\n"


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def project(tmp_path):
    """A project with a pyproject.toml and a copy of the full legacy fixture; returns the copy's path."""
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    target = tmp_path / "modeling_pebble.py"
    shutil.copyfile(BEFORE, target)
    return target


def test_diff_prints_a_unified_diff_and_writes_nothing(project):
    result = cli("migrate", "--era", "4.52", "--diff", project)
    assert result.exit_code == 0, result.output
    assert project.read_bytes() == BEFORE.read_bytes()
    diff = result.stdout
    header = [line for line in diff.splitlines() if line.startswith(("--- ", "+++ "))]
    # an absolute path is named as it is; a relative one gets git's a/ and b/ prefixes
    assert header == [f"--- {project}", f"+++ {project}"]
    assert "\n-            past_k, past_v = layer_past\n" in diff
    assert "\n+            k, v = layer_past.update(k, v, self.layer_idx)\n" in diff
    assert "\n+from transformers.cache_utils import Cache, DynamicCache\n" in diff
    # the diff is exactly the change to after.py: every added line is in after.py, every removed one in before.py
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    removed = [line[1:] for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    assert set(added) <= set(AFTER.read_text().splitlines())
    assert set(removed) <= set(BEFORE.read_text().splitlines())
    assert "would migrate" in result.stderr


def test_check_exits_1_when_a_file_would_change_and_writes_nothing(project):
    result = cli("migrate", "--era", "4.52", "--check", project)
    assert result.exit_code == 1, result.output
    assert project.read_bytes() == BEFORE.read_bytes()
    assert summary_of(result.stderr) == {"would migrate": 1}


def test_check_exits_0_on_a_migrated_file(project):
    shutil.copyfile(AFTER, project)
    result = cli("migrate", "--era", "4.52", "--check", project)
    assert result.exit_code == 0, result.output
    assert project.read_bytes() == AFTER.read_bytes()
    assert summary_of(result.stderr) == {"nothing to migrate": 1}


def test_migrate_writes_in_place_keeping_the_file_mode(project):
    project.chmod(0o640)
    result = cli("migrate", "--era", "4.52", project)
    assert result.exit_code == 0, result.output
    assert project.read_text() == AFTER.read_text()
    assert stat.S_IMODE(project.stat().st_mode) == 0o640
    assert not [p for p in project.parent.iterdir() if p.name.endswith(".cachemigrate")]  # no temporary left
    # a second run finds nothing to do
    again = cli("migrate", "--era", "4.52", project)
    assert again.exit_code == 0 and project.read_text() == AFTER.read_text()


def test_line_length_option_wins_over_pyproject(project):
    result = cli("migrate", "--era", "4.52", "--line-length", "88", project)
    assert result.exit_code == 0
    migrated = project.read_text()
    assert migrated != AFTER.read_text()  # after.py is the output at the pyproject's 119 columns
    # every line the migration wrote or edited fits in 88 columns, the signatures that grew included
    original = set(BEFORE.read_text().splitlines())
    new_lines = [line for line in migrated.splitlines() if line not in original]
    assert new_lines and all(len(line) <= 88 for line in new_lines)
    assert any(line.strip() == "cache_position=None," or "layer_idx=None" in line for line in new_lines)


def test_a_file_that_fails_keeps_its_bytes_and_prints_diagnostics(tmp_path):
    target = tmp_path / "modeling_weird.py"
    shutil.copyfile(WEIRD, target)
    result = cli("migrate", "--era", "4.52", target)
    assert result.exit_code == 1
    assert target.read_bytes() == WEIRD.read_bytes()
    text = WEIRD.read_text()
    line = next(n for n, t in enumerate(text.splitlines(), 1) if "past_key, past_value = layer_past" in t)
    column = text.splitlines()[line - 1].index("= layer_past") + 3
    assert f"{target}:{line}:{column}: CM900 `layer_past` is used as a tuple cache" in result.stdout
    assert summary_of(result.stderr) == {"left unchanged (diagnostics)": 1}


def test_user_rules_directory_on_the_command_line(tmp_path):
    target = tmp_path / "modeling_weird.py"
    shutil.copyfile(WEIRD, target)
    plain = cli("migrate", "--era", "4.52", "--check", target)
    taught = cli("migrate", "--era", "4.52", "--check", "--rules", FIXTURES / "user_rules", target)
    assert plain.stdout.count(": CM900 ") == 2
    assert taught.stdout.count(": CM900 ") == 1  # CM500 knows the model's idiom; the attention's is still unknown
    assert target.read_bytes() == WEIRD.read_bytes()


def test_a_nonexistent_path_exits_2_with_a_clear_message(tmp_path):
    missing = tmp_path / "modeling_missing.py"
    result = cli("migrate", "--era", "4.52", missing)
    assert result.exit_code == 2
    assert f"error: {missing}: no such file or directory" in result.stderr


def test_an_unknown_era_exits_2(project):
    result = cli("migrate", "--era", "9.99", project)
    assert result.exit_code == 2
    assert "unknown era '9.99'" in result.stderr and "4.52" in result.stderr


def test_a_bad_rules_directory_exits_2_naming_the_file_and_key(project):
    bad = FIXTURES / "bad_rules" / "unknown_action"
    result = cli("migrate", "--era", "4.52", "--rules", bad, project)
    assert result.exit_code == 2
    assert f"{bad / '4.52' / 'CM951.toml'}:" in result.stderr and "key `action`" in result.stderr
    assert project.read_bytes() == BEFORE.read_bytes()


def test_report_json_and_a_failing_file_does_not_stop_the_others(project, tmp_path):
    shutil.copyfile(WEIRD, project.parent / "modeling_weird.py")
    report = tmp_path / "report.json"
    result = cli("migrate", "--era", "4.52", "--report", report, project.parent)
    assert result.exit_code == 1
    assert project.read_text() == AFTER.read_text()
    assert (project.parent / "modeling_weird.py").read_bytes() == WEIRD.read_bytes()
    data = json.loads(report.read_text())
    assert data["era"] == "4.52" and data["tier"] == "dynamic"
    assert data["counts"] == {"migrated": 1, "clean": 0, "skipped": 0, "failed": 1, "error": 0}
    files = {Path(f["path"]).name: f for f in data["files"]}
    assert set(files) == {"modeling_pebble.py", "modeling_weird.py"}
    pebble, weird = files["modeling_pebble.py"], files["modeling_weird.py"]
    assert pebble["status"] == "migrated" and pebble["changed"] is True and pebble["diagnostics"] == []
    assert pebble["applied"]["CM002"] == 1 and pebble["applied"]["CM001"] >= 1
    assert weird["status"] == "failed" and weird["changed"] is False
    codes = sorted(d["code"] for d in weird["diagnostics"])
    assert codes.count("CM900") == 2 and "CM901" in codes
    first = weird["diagnostics"][0]
    assert set(first) >= {"path", "line", "column", "code", "message"}
    assert isinstance(data["seconds"], (int, float))


# ------------------------------------------------------------------------------------------------------------------
# [tool.cachemigrate] in pyproject.toml
# ------------------------------------------------------------------------------------------------------------------


def test_pyproject_tier_is_used(project):
    (project.parent / "pyproject.toml").write_text(
        PYPROJECT + '\n[tool.cachemigrate]\ntier = "dynamic"\nera = "4.52"\n'
    )
    result = cli("migrate", "--report", project.parent / "r.json", project)
    assert result.exit_code == 0, result.output
    assert project.read_text() == AFTER.read_text()
    assert json.loads((project.parent / "r.json").read_text())["tier"] == "dynamic"


def test_pyproject_static_tier_changes_the_rules_that_run(project):
    (project.parent / "pyproject.toml").write_text(PYPROJECT + '\n[tool.cachemigrate]\ntier = "static"\n')
    result = cli("migrate", "--era", "4.52", "--report", project.parent / "r.json", "--check", project)
    data = json.loads((project.parent / "r.json").read_text())
    assert data["tier"] == "static"
    # the fixture makes no attention mask in a form the static tier knows: it fails, unchanged, and says why
    assert result.exit_code == 1
    assert ": CM901 CM047 (static-causal-mask)" in result.stdout
    assert project.read_bytes() == BEFORE.read_bytes()


def test_pyproject_unknown_key_exits_2_naming_it(project):
    (project.parent / "pyproject.toml").write_text(PYPROJECT + '\n[tool.cachemigrate]\ntiers = "dynamic"\n')
    result = cli("migrate", "--era", "4.52", project)
    assert result.exit_code == 2
    assert "unknown key `tiers`" in result.stderr and str(project.parent / "pyproject.toml") in result.stderr
    assert project.read_bytes() == BEFORE.read_bytes()


@pytest.mark.parametrize(
    "setting, key", [('tier = "fast"', "tier"), ('line-length = "long"', "line-length"), ("jobs = true", "jobs")]
)
def test_pyproject_bad_value_exits_2_naming_the_key(project, setting, key):
    (project.parent / "pyproject.toml").write_text(f"[tool.cachemigrate]\n{setting}\n")
    result = cli("migrate", "--era", "4.52", project)
    assert result.exit_code == 2
    assert f"key `{key}`: expected" in result.stderr


def test_pyproject_include_and_exclude(tmp_path):
    for name in ("modeling_a.py", "legacy_b.py", "modeling_skip.py", "other.py", "sub/modeling_c.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")  # nothing to migrate: only which files are taken matters
    (tmp_path / "pyproject.toml").write_text(
        '[tool.cachemigrate]\ninclude = ["modeling_*.py", "legacy_*.py"]\nexclude = ["*_skip.py"]\n'
    )
    result = cli("migrate", "--era", "4.52", "--report", tmp_path / "r.json", tmp_path)
    assert result.exit_code == 0, result.output
    taken = {
        Path(f["path"]).relative_to(tmp_path).as_posix()
        for f in json.loads((tmp_path / "r.json").read_text())["files"]
    }
    assert taken == {"modeling_a.py", "legacy_b.py", "sub/modeling_c.py"}


# ------------------------------------------------------------------------------------------------------------------
# cachemigrate rules
# ------------------------------------------------------------------------------------------------------------------


def test_rules_lists_every_rule_id():
    result = cli("rules", "--era", "4.52")
    assert result.exit_code == 0
    listed = [line.split()[0] for line in result.stdout.splitlines()]
    assert listed == [r.id for r in load_ruleset("4.52").rules]


def test_rules_for_a_tier_lists_what_that_tier_applies():
    result = cli("rules", "--era", "4.52", "--tier", "dynamic")
    listed = {line.split()[0] for line in result.stdout.splitlines()}
    assert listed == {r.id for r in load_ruleset("4.52").for_tier("dynamic")}
    assert all(line.split()[2] == "dynamic" for line in result.stdout.splitlines())
    static = {line.split()[0] for line in cli("rules", "--era", "4.52", "--tier", "static").stdout.splitlines()}
    replaced = {old for r in load_ruleset("4.52").for_tier("static") for old in r.replaces}
    assert {"CM002", "CM031"} <= replaced  # by CM041 and CM051
    assert listed - static == replaced


def test_rules_with_a_user_directory(tmp_path):
    result = cli("rules", "--era", "4.52", "--rules", FIXTURES / "user_rules")
    assert result.exit_code == 0
    [line] = [line for line in result.stdout.splitlines() if line.startswith("CM500")]
    assert "past-length-of-last-layer" in line
    # the same id as a built-in replaces it in the listing
    override = (FIXTURES.parent / "rules" / "4.52" / "CM030.toml").read_text()
    (tmp_path / "CM030.toml").write_text(override.replace('name = "supports-cache-class"', 'name = "my-flag"'))
    result = cli("rules", "--era", "4.52", "--rules", tmp_path)
    lines = [line for line in result.stdout.splitlines() if line.startswith("CM030")]
    assert len(lines) == 1 and "my-flag" in lines[0]


def test_rules_with_a_bad_directory_exits_2():
    result = cli("rules", "--era", "4.52", "--rules", FIXTURES / "bad_rules" / "era_mismatch")
    assert result.exit_code == 2
    assert "key `era`: expected the era of its directory, '4.52'; got '4.56'" in result.stderr


# ------------------------------------------------------------------------------------------------------------------
# Parallel jobs
# ------------------------------------------------------------------------------------------------------------------


def test_jobs_2_gives_the_same_files_as_jobs_1(tmp_path):
    sources = {
        "modeling_lark.py": FIXTURES / "4.52" / "CM001" / "before.py",
        "modeling_heron.py": FIXTURES / "4.52" / "CM002" / "before.py",
        "modeling_weird.py": WEIRD,
    }
    outputs = {}
    for jobs in (1, 2):
        root = tmp_path / f"jobs{jobs}"
        root.mkdir()
        (root / "pyproject.toml").write_text(PYPROJECT)
        for name, source in sources.items():
            shutil.copyfile(source, root / name)
        result = cli("migrate", "--era", "4.52", "--jobs", jobs, root)  # --jobs 2 runs a process pool
        assert result.exit_code == 1, result.output  # modeling_weird.py cannot be migrated
        assert result.stdout.count(": CM900 ") == 2
        outputs[jobs] = {name: (root / name).read_bytes() for name in sources}
    assert outputs[1] == outputs[2]
    assert outputs[1]["modeling_weird.py"] == WEIRD.read_bytes()
    assert b"DynamicCache" in outputs[1]["modeling_lark.py"] and b"DynamicCache" in outputs[1]["modeling_heron.py"]


def test_diff_of_a_relative_path_has_git_prefixes(project, monkeypatch):
    monkeypatch.chdir(project.parent)
    result = cli("migrate", "--era", "4.52", "--diff", project.name)
    assert result.exit_code == 0, result.output
    header = [line for line in result.stdout.splitlines() if line.startswith(("--- ", "+++ "))]
    assert header == [f"--- a/{project.name}", f"+++ b/{project.name}"]
