"""What a person sees from ``cachemigrate migrate``: a bar on a terminal, plain lines otherwise, a line per file that
changes or fails, the summary table, -v, colour, -h, standard input, the skip comment, and usage errors."""

import fcntl
import os
import pty
import shutil
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from click.testing import CliRunner

from cachemigrate.cli.main import main
from conftest import summary_of

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
BEFORE = FIXTURES / "4.52" / "full" / "before.py"
AFTER = FIXTURES / "4.52" / "full" / "after.py"
WEIRD = FIXTURES / "unknown_idiom" / "modeling_weird.py"
CLEAN = "import torch\n\n\ndef f(x):\n    return x\n"


def cli(*args, input=None):
    return CliRunner().invoke(main, [str(a) for a in args], input=input)


@pytest.fixture
def fork(tmp_path) -> Path:
    fork = tmp_path / "fork"
    fork.mkdir()
    (fork / "pyproject.toml").write_text("[tool.black]\nline-length = 119\n")
    shutil.copyfile(BEFORE, fork / "modeling_pebble.py")
    shutil.copyfile(WEIRD, fork / "modeling_weird.py")
    for number in range(3):
        (fork / f"modeling_clean{number}.py").write_text(f"{CLEAN}\nNUMBER = {number}\n")
    return fork


def test_plain_lines_a_line_per_changed_or_failed_file_and_a_summary_table(fork):
    result = cli("migrate", "--era", "4.52", "--check", fork)
    assert result.exit_code == 1
    lines = [line for line in result.stderr.splitlines() if line.startswith("[")]
    assert len(lines) == 2 and "\r" not in result.stderr and "\x1b[" not in result.output
    assert any("modeling_pebble.py: would migrate" in line for line in lines)
    assert any("modeling_weird.py: failed" in line for line in lines)
    assert summary_of(result.stderr) == {
        "would migrate": 1,
        "left unchanged (diagnostics)": 1,
        "nothing to migrate": 3,
    }
    assert "cachemigrate: 5 files in " in result.stderr
    verbose = cli("migrate", "--era", "4.52", "--check", "-v", "--no-cache", fork)
    lines = [line for line in verbose.stderr.splitlines() if line.startswith("[")]
    assert len(lines) == 5 and sum(line.endswith(", prefilter)") for line in lines) == 3
    assert "answered: 2 by the engine, 3 by the prefilter" in verbose.stderr
    again = cli("migrate", "--era", "4.52", "--check", "-v", fork)
    assert all(line.endswith(", cache)") for line in again.stderr.splitlines() if line.startswith("["))
    quiet = cli("migrate", "--era", "4.52", "--check", "-q", fork)
    assert quiet.stderr == "" and ": CM900 " in quiet.stdout


def test_a_progress_bar_on_a_terminal(fork):
    """On a TTY the bar counts the files; the per-file lines and the table are still printed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal 100 columns wide
    env = {**os.environ, "TERM": "xterm"}
    command = [sys.executable, "-m", "cachemigrate.cli.main", "migrate", "--era", "4.52", "--check", str(fork)]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env, cwd=REPO)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the other side closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert process.wait(timeout=600) == 1
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert "file/s" in screen or "s/file" in screen  # tqdm's rate
    assert "5/5" in screen and "modeling_pebble.py: " in screen
    assert "\x1b[" in screen  # a terminal gets colour by default
    assert "would migrate" in screen.split("cachemigrate: 5 files")[-1]


def test_color_on_and_off():
    with_color = cli("migrate", "--era", "4.52", "--diff", "--color", BEFORE)
    assert "\x1b[32m+" in with_color.stdout and "\x1b[31m-" in with_color.stdout
    plain = cli("migrate", "--era", "4.52", "--diff", "--no-color", BEFORE)
    assert "\x1b[" not in plain.output and "\n+            k, v = layer_past.update(" in plain.stdout


def test_help_with_h():
    for args in (["-h"], ["migrate", "-h"], ["probe", "-h"]):
        result = cli(*args)
        assert result.exit_code == 0 and "Usage:" in result.stdout
    assert "--stdin-filename" in cli("migrate", "-h").stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["-j", "0"], "Invalid value for '--jobs' / '-j': 0 is not in the range x>=1"),
        (["-j", "-2"], "Invalid value for '--jobs' / '-j': -2 is not in the range x>=1"),
        (["--line-length", "0"], "Invalid value for '--line-length': 0 is not in the range x>=1"),
    ],
)
def test_nonpositive_jobs_and_line_length_are_usage_errors(fork, args, message):
    result = cli("migrate", "--era", "4.52", *args, fork)
    assert result.exit_code == 2 and message in result.stderr
    assert (fork / "modeling_pebble.py").read_bytes() == BEFORE.read_bytes()


@pytest.mark.parametrize(
    "setting, key", [("jobs = 0", "jobs"), ("line-length = 0", "line-length"), ("jobs = -1", "jobs")]
)
def test_nonpositive_jobs_and_line_length_in_config_exit_2(fork, setting, key):
    (fork / "pyproject.toml").write_text(f"[tool.cachemigrate]\n{setting}\n")
    result = cli("migrate", "--era", "4.52", fork)
    assert result.exit_code == 2 and f"key `{key}`: expected a positive integer" in result.stderr


# --------------------------------------------------------------------------------------------------------------
# Standard input
# --------------------------------------------------------------------------------------------------------------


def test_stdin_to_stdout_with_the_config_of_the_stdin_filename(fork):
    name = fork / "sub" / "modeling_x.py"  # need not exist; its pyproject.toml (119 columns) is found
    result = cli("migrate", "--era", "4.52", "-", "--stdin-filename", name, input=BEFORE.read_bytes())
    assert result.exit_code == 0, result.stderr
    assert result.stdout_bytes == AFTER.read_bytes()
    assert not name.exists()
    check = cli("migrate", "--era", "4.52", "--check", "-", "--stdin-filename", name, input=BEFORE.read_bytes())
    assert check.exit_code == 1 and check.stdout == "" and f"{name}: would migrate" in check.stderr
    diff = cli("migrate", "--era", "4.52", "--diff", "-", "--stdin-filename", name, input=BEFORE.read_bytes())
    assert diff.exit_code == 0 and f"--- {name}\n+++ {name}\n" in diff.stdout


def test_stdin_that_cannot_or_need_not_change_comes_back_unchanged(fork):
    weird = cli("migrate", "--era", "4.52", "-", "--stdin-filename", fork / "modeling_w.py", input=WEIRD.read_bytes())
    assert weird.exit_code == 1 and weird.stdout_bytes == WEIRD.read_bytes()
    assert f"{fork / 'modeling_w.py'}:" in weird.stderr and ": CM900 " in weird.stderr  # diagnostics on stderr
    clean = cli("migrate", "--era", "4.52", "-", input=CLEAN)
    assert clean.exit_code == 0 and clean.stdout == CLEAN
    unnamed = cli("migrate", "--era", "4.52", "--check", "-", input=WEIRD.read_bytes())
    assert unnamed.exit_code == 1 and "-:" in unnamed.stderr


def test_a_force_excluded_stdin_filename_is_echoed_unchanged(fork):
    tf = fork / "modeling_tf_x.py"
    result = cli("migrate", "--era", "4.52", "--force-exclude", "-", "--stdin-filename", tf, input=BEFORE.read_bytes())
    assert result.exit_code == 0 and result.stdout_bytes == BEFORE.read_bytes()
    taken = cli("migrate", "--era", "4.52", "-", "--stdin-filename", tf, input=BEFORE.read_bytes())
    assert taken.stdout_bytes != BEFORE.read_bytes()  # without --force-exclude a named file is always taken


@pytest.mark.parametrize(
    "args", [["-", "other.py"], ["--stdin-filename", "x.py", "other.py"], ["-", "--report", "r.json"]]
)
def test_stdin_usage_errors(fork, args):
    result = cli("migrate", "--era", "4.52", *args, input="")
    assert result.exit_code == 2 and "error:" in result.stderr


# --------------------------------------------------------------------------------------------------------------
# # cachemigrate: skip
# --------------------------------------------------------------------------------------------------------------


def test_a_file_marked_skip_is_reported_skipped_and_left_alone(fork):
    marked = fork / "modeling_weird.py"
    marked.write_text("# cachemigrate: skip\n" + WEIRD.read_text())
    result = cli("migrate", "--era", "4.52", "-v", fork)
    assert result.exit_code == 0, result.output
    assert marked.read_text() == "# cachemigrate: skip\n" + WEIRD.read_text()
    assert summary_of(result.stderr) == {"migrated": 1, "nothing to migrate": 3, "skipped (# cachemigrate: skip)": 1}
    assert any(line.endswith("skipped (0.0s, skip comment)") for line in result.stderr.splitlines())


def test_the_eta_is_files_done_over_time_elapsed_not_a_moving_average(monkeypatch):
    """Files the engine takes seconds on, then a burst the prefilter answers at once: the estimate of the time left
    stays the average over the run (a moving average of the last files would drop it by far more than the burst
    saves)."""
    from cachemigrate.cli import progress

    monkeypatch.setattr(progress, "_is_terminal", lambda stream: True)
    reporter = progress.Reporter(1000)
    bar = reporter.bar
    now = [0.0]
    bar._time = lambda: now[0]
    bar.start_t = bar.last_print_t = 0.0
    bar.mininterval = bar.miniters = 0

    def eta() -> float:
        info = bar.format_dict
        rate = info["rate"] or info["n"] / info["elapsed"]  # tqdm's own fallback when it keeps no moving average
        return (info["total"] - info["n"]) / rate

    for _ in range(20):  # the engine: 2 s a file
        now[0] += 2.0
        reporter.file("engine.py", "failed", "failed", 2.0, "engine")
    before = eta()
    for _ in range(200):  # the prefilter: a millisecond a file
        now[0] += 0.001
        reporter.file("clean.py", "clean", "clean", 0.0, "prefilter")
    after = eta()
    reporter.close()
    elapsed = now[0]
    assert after == pytest.approx(elapsed / 220 * (1000 - 220))
    assert before == pytest.approx(2.0 * (1000 - 20))
    # a moving average of the last files would say the burst's pace: 780 files at a millisecond each, under a second
    assert after > 100 * (1000 - 220) * 0.001
