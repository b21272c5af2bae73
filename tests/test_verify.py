"""Tests for ``cachemigrate verify`` (and ``migrate --verify``) on copies of the tinyfork fixture.

Every test copies fixtures/tinyfork to tmp_path; the fixture itself is never touched. The tests that need a slow
test suite add a test to the copy that sleeps only once the modeling file has been migrated, and run just that
file, so that the baseline run is quick and no torch import is paid for.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from cachemigrate.cli.main import main
from cachemigrate.verify import compare, Outcome, parse_junit

pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parent.parent
TINYFORK = REPO / "fixtures" / "tinyfork"
BROKEN_RULES = REPO / "fixtures" / "broken_rules"
MODELING = Path("tinyfork") / "modeling_tinyfork.py"

# Sleeps once the modeling file next to it has been migrated (it then names DynamicCache); writes its pid first.
SLOW_TEST = """
import os, pathlib, time

MODELING = pathlib.Path(__file__).resolve().parents[1] / "tinyfork" / "modeling_tinyfork.py"


def test_sleeps_once_migrated():
    if "DynamicCache" in MODELING.read_text():
        pathlib.Path(os.environ["SLOW_TEST_PID_FILE"]).write_text(str(os.getpid()))
        time.sleep(30)
"""


@pytest.fixture
def fork(tmp_path):
    """A fresh copy of the tinyfork fixture; returns its root."""
    root = tmp_path / "tinyfork"
    shutil.copytree(TINYFORK, root, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    return root


def verify(*args):
    return CliRunner().invoke(main, ["verify", "--era", "4.52", *map(str, args)])


def test_verify_builtin_rules_migrates_and_keeps_every_test_green(fork, tmp_path):
    original = (fork / MODELING).read_bytes()
    report = tmp_path / "report.json"
    result = verify(fork, "--probe", "--report", report)
    assert result.exit_code == 0, result.output
    assert "verified: no test regressed" in result.output
    assert (fork / MODELING).read_bytes() != original
    assert b"DynamicCache" in (fork / MODELING).read_bytes()
    data = json.loads(report.read_text())
    assert data["verdict"] == "ok" and data["restored"] is False
    assert data["root"] == str(fork)
    assert [f["status"] for f in data["files"] if f["changed"]] == ["migrated"]
    assert (
        data["baseline"]["counts"] == data["after"]["counts"] == {"passed": 10, "skipped": 0, "failed": 0, "error": 0}
    )
    assert data["regressions"] == data["preexisting"] == data["vanished"] == []
    [(path, checks)] = data["probe"].items()  # the probe ran on the migrated file against a copy of the original
    assert path == str(fork / MODELING)
    statuses = {check["name"]: check["status"] for check in checks}
    assert statuses["tuple_cache_stepwise"] == statuses["dynamic_cache_in_same_object"] == "pass"
    assert set(statuses.values()) <= {"pass", "skip"}


def test_verify_broken_rules_reports_regressions_and_restores_the_originals(fork, tmp_path):
    originals = {path: path.read_bytes() for path in fork.rglob("*.py")}
    report = tmp_path / "report.json"
    result = verify(fork, "--rules", BROKEN_RULES, "--report", report)
    assert result.exit_code == 1, result.output
    assert "regression(s) after the migration" in result.stdout
    for test in ("test_incremental_decoding_matches_full_forward", "test_past_is_tuple_of_key_value_pairs"):
        assert f"tests.test_tinyfork::{test}" in result.stdout
    assert "Tensor-likes are not close" in result.stdout  # the first lines of the failure
    assert "restored the original bytes of 1 file(s)" in result.stdout
    assert {path: path.read_bytes() for path in fork.rglob("*.py")} == originals
    assert not list(fork.rglob("*.cachemigrate"))  # no temp file of an atomic write left behind
    data = json.loads(report.read_text())
    assert data["verdict"] == "regression" and data["restored"] is True
    assert data["files"][0]["diagnostics"] == []  # the broken rule "succeeds": only the tests catch it
    regressed = {r["test"]: (r["before"], r["after"]) for r in data["regressions"]}
    assert regressed["tests.test_tinyfork::test_incremental_decoding_matches_full_forward"] == ("passed", "failed")
    assert data["after"]["counts"]["failed"] == len(regressed)


def test_probe_catches_the_broken_migration_without_any_test(fork, tmp_path):
    from cachemigrate.probe import run_probe

    original = tmp_path / "original"
    shutil.copytree(fork / "tinyfork", original / "tinyfork")
    broken = tmp_path / "broken"
    shutil.copytree(fork, broken)
    migrated = CliRunner().invoke(main, ["migrate", "--era", "4.52", "-q", str(fork / "tinyfork")])
    assert migrated.exit_code == 0, migrated.output
    migrated = CliRunner().invoke(main, ["migrate", "--era", "4.52", "-q", "--rules", str(BROKEN_RULES), str(broken)])
    assert migrated.exit_code == 0, migrated.output  # no diagnostics: the rule looks fine

    checks = ["logits_no_cache", "tuple_cache_stepwise", "tuple_in_tuple_out", "dynamic_cache_in_same_object"]
    bad = {r.name: r.status for r in run_probe(original / MODELING, broken / MODELING, checks=checks)}
    assert bad["logits_no_cache"] == "pass"  # without a cache the broken model is right...
    assert bad["tuple_cache_stepwise"] == "fail"  # ...but it ignores the past
    good = run_probe(original / MODELING, fork / MODELING)
    assert not [(r.name, r.detail) for r in good if r.status in ("fail", "error")]


def test_preexisting_failure_is_not_blamed(fork, tmp_path):
    # Only this file runs (no torch import: fast); the modeling file is migrated all the same.
    (fork / "tests" / "test_known_bug.py").write_text(
        "def test_known_bug():\n    assert 1 + 1 == 3\n\n\ndef test_fine():\n    assert True\n"
    )
    report = tmp_path / "report.json"
    tests = "python -m pytest tests/test_known_bug.py"
    result = CliRunner().invoke(
        main, ["migrate", "--verify", "--era", "4.52", "--tests", tests, "--report", str(report), str(fork)]
    )
    assert result.exit_code == 0, result.output
    assert "pre-existing failure" in result.stderr and "test_known_bug" in result.stderr
    assert b"DynamicCache" in (fork / MODELING).read_bytes()  # kept
    data = json.loads(report.read_text())
    assert data["preexisting"] == ["tests.test_known_bug::test_known_bug"]
    assert data["regressions"] == []
    assert (
        data["baseline"]["counts"] == data["after"]["counts"] == {"passed": 1, "skipped": 0, "failed": 1, "error": 0}
    )


def _slow_fork(fork: Path) -> str:
    (fork / "tests" / "test_slow.py").write_text(SLOW_TEST)
    return "python -m pytest tests/test_slow.py"


def test_timeout_restores_the_originals(fork, tmp_path, monkeypatch):
    original = (fork / MODELING).read_bytes()
    monkeypatch.setenv("SLOW_TEST_PID_FILE", str(tmp_path / "pid"))
    started = time.monotonic()
    result = verify(fork, "--tests", _slow_fork(fork), "--timeout", "5")
    assert result.exit_code == 1, result.output
    assert "timed out after 5 s" in result.output
    assert time.monotonic() - started < 25
    assert (fork / MODELING).read_bytes() == original
    _assert_gone(int((tmp_path / "pid").read_text()))


def test_sigterm_during_the_second_run_restores_the_originals(fork, tmp_path):
    original = (fork / MODELING).read_bytes()
    env = {**os.environ, "SLOW_TEST_PID_FILE": str(tmp_path / "pid")}
    command = [
        sys.executable,
        "-m",
        "cachemigrate.cli.main",
        "verify",
        "--era",
        "4.52",
        "--tests",
        _slow_fork(fork),
        str(fork),
    ]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while (fork / MODELING).read_bytes() == original:  # wait until the migration is written
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        pid_file = tmp_path / "pid"  # and the slow test sleeps (its pid is written, not only the file made)
        while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signal.SIGTERM, stdout + stderr
    assert "interrupted by SIGTERM" in stderr
    assert (fork / MODELING).read_bytes() == original
    _assert_gone(int((tmp_path / "pid").read_text()))


def _assert_gone(pid: int) -> None:
    """The sleeping test process was killed with its process group."""
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_non_pytest_command_is_judged_by_its_exit_status_and_usage_errors(fork):
    original = (fork / MODELING).read_bytes()
    fails_once_migrated = (
        'python -c \'import sys; sys.exit("DynamicCache" in open("tinyfork/modeling_tinyfork.py").read())\''
    )
    result = verify(fork, "--tests", fails_once_migrated)
    assert result.exit_code == 1, result.output
    assert "passed  failed" in result.stdout and "exit status 1" in result.stdout
    assert (fork / MODELING).read_bytes() == original
    result = verify(fork, "--tests", "python -c 'raise SystemExit(3)'")  # broken on the original: nothing to judge
    assert result.exit_code == 2 and "fails on the original code (exit 3)" in result.stderr
    assert (fork / MODELING).read_bytes() == original
    result = CliRunner().invoke(main, ["migrate", "--verify", "--diff", str(fork)])
    assert result.exit_code == 2 and "cannot be combined" in result.stderr


def test_junit_parsing_and_comparison(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text("""<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
        <testcase classname="tests.test_a" name="test_ok" time="0.1"/>
        <testcase classname="tests.test_a" name="test_bad" time="0.1"><failure message="AssertionError: boom&#10;more&#10;x&#10;y">tb</failure></testcase>
        <testcase classname="tests.test_a" name="test_skip" time="0.1"><skipped message="skip"/></testcase>
        <testcase classname="tests.test_a" name="test_teardown" time="0.1"/>
        <testcase classname="tests.test_a" name="test_teardown" time="0.1"><error message="teardown failed"/></testcase>
        <testcase classname="" name="tests.test_b" time="0.1"><error message="collection failure"/></testcase>
        </testsuite></testsuites>""")
    outcomes = parse_junit(junit)
    assert {test: o.status for test, o in outcomes.items()} == {
        "tests.test_a::test_ok": "passed",
        "tests.test_a::test_bad": "failed",
        "tests.test_a::test_skip": "skipped",
        "tests.test_a::test_teardown": "error",  # the worst of call and teardown
        "tests.test_b": "error",
    }
    assert outcomes["tests.test_a::test_bad"].message == "AssertionError: boom\nmore\nx"
    before = {"a": Outcome("passed"), "b": Outcome("failed"), "c": Outcome("failed"), "d": Outcome("passed")}
    after = {"a": Outcome("error"), "b": Outcome("passed"), "c": Outcome("failed"), "e": Outcome("error")}
    verdict = compare(before, after)
    assert [(r.test, r.before, r.after) for r in verdict["regressions"]] == [
        ("a", "passed", "error"),
        ("e", "absent", "error"),
    ]
    assert (verdict["improvements"], verdict["preexisting"], verdict["vanished"]) == (["b"], ["c"], ["d"])
