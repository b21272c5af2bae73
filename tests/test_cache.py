"""The result cache (cachemigrate.cli.result_cache): a re-run on unchanged bytes answers from it with the same output; any
change of the bytes, the rules or the options is a miss; what depends on more than the bytes is never stored."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cachemigrate.cli.result_cache import KEEP_CONTEXTS, ResultCache, context_key, digest
from cachemigrate.cli.main import main
from cachemigrate.results import FileResult, Options

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BEFORE = FIXTURES / "4.52" / "full" / "before.py"
AFTER = FIXTURES / "4.52" / "full" / "after.py"
WEIRD = FIXTURES / "unknown_idiom" / "modeling_weird.py"


def cli(*args):
    return CliRunner().invoke(main, ["migrate", "--era", "4.52", "-v", *map(str, args)])


@pytest.fixture
def fork(tmp_path) -> Path:
    fork = tmp_path / "fork"
    fork.mkdir()
    (fork / "pyproject.toml").write_text("[tool.black]\nline-length = 119\n")
    shutil.copyfile(BEFORE, fork / "modeling_pebble.py")
    shutil.copyfile(WEIRD, fork / "modeling_weird.py")
    shutil.copyfile(AFTER, fork / "modeling_done.py")
    (fork / "modeling_plain.py").write_text("import torch\n\n\ndef f(x):\n    return x\n")
    return fork


def answers(stderr: str) -> dict[str, str]:
    """file name -> how -v says it was answered (engine, prefilter, cache)."""
    found = {}
    for line in stderr.splitlines():
        if line.startswith("[") and ", " in line:
            name = line.split("] ", 1)[1].split(": ", 1)[0]
            found[Path(name).name] = line.rsplit(", ", 1)[1].rstrip(")")
    return found


def test_a_second_run_answers_from_the_cache_with_the_same_output(fork):
    first = cli("--diff", fork)
    assert answers(first.stderr) == {
        "modeling_done.py": "engine",
        "modeling_pebble.py": "engine",
        "modeling_plain.py": "prefilter",
        "modeling_weird.py": "engine",
    }
    second = cli("--diff", fork)
    assert set(answers(second.stderr).values()) == {"cache"}
    assert (second.exit_code, second.stdout) == (first.exit_code, first.stdout) == (1, second.stdout)
    assert "+            k, v = layer_past.update(k, v, self.layer_idx)" in second.stdout
    assert f"{fork / 'modeling_weird.py'}:" in second.stdout and ": CM900 " in second.stdout
    # writing from the cache gives the engine's bytes
    assert cli(fork).exit_code == 1  # modeling_weird.py cannot be migrated
    assert (fork / "modeling_pebble.py").read_bytes() == AFTER.read_bytes()


def test_the_same_bytes_elsewhere_are_a_hit_with_their_own_path(fork, tmp_path):
    first = cli("--check", fork / "modeling_weird.py")
    assert first.exit_code == 1
    other = tmp_path / "elsewhere" / "modeling_other.py"
    other.parent.mkdir()
    shutil.copyfile(fork / "pyproject.toml", other.parent / "pyproject.toml")  # the same line length
    shutil.copyfile(WEIRD, other)
    result = cli("--check", other)
    assert answers(result.stderr) == {"modeling_other.py": "cache"}
    assert result.stdout == first.stdout.replace(str(fork / "modeling_weird.py"), str(other))


def test_changed_bytes_rules_or_options_miss(fork):
    target = fork / "modeling_pebble.py"
    assert answers(cli("--check", target).stderr) == {"modeling_pebble.py": "engine"}
    assert answers(cli("--check", target).stderr) == {"modeling_pebble.py": "cache"}
    assert answers(cli("--check", "--line-length", "100", target).stderr) == {"modeling_pebble.py": "engine"}
    assert answers(cli("--check", "--tier", "static", target).stderr) == {"modeling_pebble.py": "engine"}
    assert answers(cli("--check", "--rules", FIXTURES / "user_rules", target).stderr) == {
        "modeling_pebble.py": "engine"
    }
    target.write_bytes(BEFORE.read_bytes() + b"\n# changed\n")
    assert answers(cli("--check", target).stderr) == {"modeling_pebble.py": "engine"}


def test_no_cache_reads_and_writes_nothing(fork):
    root = Path(os.environ["CACHEMIGRATE_CACHE_DIR"])
    cli("--no-cache", "--check", fork)
    assert not root.exists() or not any(root.rglob("*.json"))
    cli("--check", fork)
    assert any(root.rglob("*.json"))
    assert set(answers(cli("--no-cache", "--check", fork).stderr).values()) == {"engine", "prefilter"}


def test_context_key_covers_rules_options_and_version(tmp_path):
    base = context_key("4.52", (), Options())
    assert context_key("4.52", (), Options()) == base
    assert context_key("4.52", (), Options(line_length=100)) != base
    assert context_key("4.52", (), Options(signature="upstream")) != base
    rules = tmp_path / "rules"
    shutil.copytree(FIXTURES / "user_rules", rules)
    with_rules = context_key("4.52", (rules,), Options())
    assert with_rules != base
    (rules / "4.52" / "CM500.toml").write_text((rules / "4.52" / "CM500.toml").read_text() + "\n# edited\n")
    assert context_key("4.52", (rules,), Options()) != with_rules


def _result(status: str, code: str = "CM900", migrated: str = "x = 1\n") -> FileResult:
    from cachemigrate.diagnostics import Diagnostic

    diagnostics = [Diagnostic("a.py", 3, 4, code, "why")] if status == "failed" else []
    return FileResult("a.py", "x = 0\n", migrated if status == "migrated" else "x = 0\n", status, diagnostics)


def test_what_is_stored_and_what_is_not(tmp_path):
    cache = ResultCache(tmp_path, "context")
    for key, result in [("m", _result("migrated")), ("f", _result("failed")), ("c", _result("clean"))]:
        cache.put(key, result)
        got = cache.get(key, "b.py", "x = 0\n")
        assert (got.status, got.migrated, got.path) == (result.status, result.migrated, "b.py")
        assert [(d.path, d.line, d.column, d.code) for d in got.diagnostics] == [
            ("b.py", d.line, d.column, d.code) for d in result.diagnostics
        ]
    cache.put("e", _result("error"))
    cache.put("ro", _result("failed", code="CM905"))  # read-only: about the file, not its bytes
    assert cache.get("e", "a.py", "x = 0\n") is None and cache.get("ro", "a.py", "x = 0\n") is None
    (tmp_path / "context" / "m.json").write_text("{not json")
    assert cache.get("m", "a.py", "x = 0\n") is None  # a damaged entry is a miss
    (tmp_path / "context" / "f.json").write_text(json.dumps({"status": "weird", "applied": {}, "diagnostics": []}))
    assert cache.get("f", "a.py", "x = 0\n") is None


def test_old_contexts_are_pruned(tmp_path):
    for number in range(KEEP_CONTEXTS + 3):
        folder = tmp_path / f"old{number:02d}"
        folder.mkdir()
        os.utime(folder, (1000 + number, 1000 + number))
    ResultCache(tmp_path, "current").put(digest(b"x"), _result("clean"))
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert "current" in kept and len(kept) == KEEP_CONTEXTS
    assert "old00" not in kept and f"old{KEEP_CONTEXTS + 2:02d}" in kept


def test_a_warm_run_imports_neither_libcst_nor_black(fork):
    """Every file answered by the prefilter or the cache: the engine's dependencies are never loaded."""
    assert cli("--check", fork).exit_code == 1  # fills the cache (and checks the rules once)
    code = (
        "import sys\nfrom cachemigrate.cli.main import main\n"
        "try:\n    main(['migrate', '--era', '4.52', '--check', sys.argv[1]])\n"
        "except SystemExit as exc:\n    status = exc.code\n"
        "print(status, sorted({m.split('.')[0] for m in sys.modules} & {'libcst', 'black'}))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(fork)], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "1 []", out.stderr
