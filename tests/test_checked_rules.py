"""The record of the rule sets that loaded (cachemigrate.rules.checked): rule files are checked once per content, not
on every run, whatever --no-cache says; a changed rule file, built-in or user, is checked again, and a bad one is
still exit 2 before any file is answered; the package's own record (written when the wheel is built) lists every
built-in era."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cachemigrate.cli.main import main
from cachemigrate.cli.result_cache import KEEP_CONTEXTS, ResultCache, digest
from cachemigrate.results import FileResult
from cachemigrate.rules import checked
from cachemigrate.rules.checked import FOLDER, CheckedRules, rules_key, write_built_record
from cachemigrate.rules.eras import BUILTIN_RULES, available_eras, fingerprint
from cachemigrate.rules.schema import RuleError

REPO = Path(__file__).resolve().parent.parent
USER_RULES = REPO / "fixtures" / "user_rules"
CLEAN = "import torch\n\n\ndef f(x):\n    return x\n"

# a fresh process: its exit status, and whether it imported libcst (loading the rules does)
RUN = (
    "import sys\nfrom cachemigrate.cli.main import main\n"
    "try:\n    main(['migrate', '--era', '4.52', *sys.argv[1:]])\n"
    "except SystemExit as exc:\n    status = exc.code\n"
    "print(status, 'libcst' in sys.modules)"
)


def fresh(*args) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", RUN, *map(str, args)], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()[-2:]


@pytest.fixture
def clean(tmp_path) -> Path:
    target = tmp_path / "modeling_clean.py"
    target.write_text(CLEAN)
    return target


@pytest.mark.skipif(checked.BUILT.exists(), reason="this package has the record of its build")
def test_with_no_cache_the_rules_are_checked_once_then_a_clean_file_never_loads_them(clean):
    root = Path(os.environ["CACHEMIGRATE_CACHE_DIR"])
    assert fresh("--check", "--no-cache", clean) == ["0", "True"]  # a checkout: the first run checks them
    assert [p.parent.name for p in root.rglob("*") if p.is_file()] == [FOLDER]  # the record, no result
    assert fresh("--check", "--no-cache", clean) == ["0", "False"]
    assert fresh("--check", clean) == ["0", "False"]  # with the result cache too: the same record
    assert not list((root / FOLDER).iterdir())[1:]


def test_a_changed_user_rule_file_is_checked_again_even_with_no_cache(clean, tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(USER_RULES, rules)
    args = ["migrate", "--era", "4.52", "--check", "--no-cache", "--rules", str(rules), str(clean)]
    assert CliRunner().invoke(main, args).exit_code == 0
    assert CheckedRules(Path(os.environ["CACHEMIGRATE_CACHE_DIR"])).known("4.52", (rules,))
    rule = rules / "4.52" / "CM500.toml"
    rule.write_text(rule.read_text().replace('action = "', 'action = "no_such_'))
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert f"{rule}:" in result.stderr and "key `action`" in result.stderr
    assert clean.read_text() == CLEAN


def test_without_a_cache_folder_nothing_is_recorded(clean, monkeypatch):
    monkeypatch.setenv("CACHEMIGRATE_CACHE_DIR", "")
    bad = REPO / "fixtures" / "bad_rules" / "unknown_action"
    for _ in range(2):  # every run checks its rules first
        result = CliRunner().invoke(main, ["migrate", "--era", "4.52", "--check", "--rules", str(bad), str(clean)])
        assert result.exit_code == 2 and "key `action`" in result.stderr, result.output
    records = CheckedRules(None)
    records.remember("4.52", ())
    assert records.folder is None and not records.known("4.52", (bad,))


def test_the_package_record_lists_every_built_in_era_and_no_user_folder(tmp_path):
    record = tmp_path / "checked.json"
    eras = write_built_record(record)
    assert eras == available_eras() and json.loads(record.read_text())["eras"] == eras
    built = CheckedRules(None, built=record)
    assert all(built.known(era, ()) for era in eras)
    assert not built.known("4.52", (USER_RULES,))  # user folders are recorded per user, when they load
    assert not CheckedRules(None, built=tmp_path / "none.json").known("4.52", ())


def test_a_changed_built_in_rule_is_not_in_the_record(tmp_path):
    root = tmp_path / "rules"
    shutil.copytree(BUILTIN_RULES, root)
    record = tmp_path / "checked.json"
    write_built_record(record, root)
    built = CheckedRules(None, built=record)
    assert built.known("5", (), root)
    rule = next((root / "4.52").glob("CM0*.toml"))  # an ancestor of era 5
    rule.write_text(rule.read_text() + "\n# edited\n")
    assert not built.known("5", (), root)


def test_a_bad_built_in_rule_file_writes_no_record_and_names_the_file_and_key(tmp_path):
    root = tmp_path / "rules"
    shutil.copytree(BUILTIN_RULES, root)
    rule = root / "4.56" / next((root / "4.56").glob("CM*.toml")).name
    rule.write_text(rule.read_text().replace('action = "', 'action = "no_such_'))
    record = tmp_path / "checked.json"
    with pytest.raises(RuleError) as error:
        write_built_record(record, root)
    assert f"{rule}:" in str(error.value) and "key `action`" in str(error.value)
    assert not record.exists()


def test_the_record_is_kept_when_old_result_contexts_are_pruned(tmp_path):
    records = CheckedRules(tmp_path)
    records.remember("4.52", (USER_RULES,))
    os.utime(tmp_path / FOLDER, (1, 1))
    for number in range(KEEP_CONTEXTS + 2):
        (tmp_path / f"old{number:02d}").mkdir()
    ResultCache(tmp_path, "current").put(digest(b"x"), FileResult("a.py", "x\n", "x\n", "clean", []))
    assert records.known("4.52", (USER_RULES,))


def test_the_key_covers_every_file_a_user_folder_gives_the_loader(tmp_path):
    """A user folder's rules of an ancestor era (``<dir>/4.52/`` for era 5) and its ``vendor/`` helpers are loaded
    too: a change of one is a new key (and a new result-cache context)."""
    rules = tmp_path / "rules"
    shutil.copytree(USER_RULES, rules)
    (rules / "vendor").mkdir()
    (rules / "vendor" / "mine.py").write_text("def helper():\n    return 1\n")
    before = fingerprint("5", (rules,)), rules_key("5", (rules,))
    rule = rules / "4.52" / "CM500.toml"
    rule.write_text(rule.read_text() + "\n# edited\n")
    edited = fingerprint("5", (rules,)), rules_key("5", (rules,))
    (rules / "vendor" / "mine.py").write_text("def helper():\n    return 2\n")
    vendored = fingerprint("5", (rules,)), rules_key("5", (rules,))
    assert len({before, edited, vendored}) == 3
    assert rules_key("5", (rules,)) != rules_key("5", (tmp_path / "elsewhere",))
