"""Ctrl-C and SIGTERM during ``cachemigrate migrate``: a quick stop, 130/143, no worker left running, and every
file fully old or fully new. Each test runs the real command line in a subprocess on 40 copies of the legacy
fixture, and signals it once the first file has been written. Each copy ends in its own comment: identical files
would be answered from the run's result cache in no time, and the run could end before the signal arrives."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BEFORE = (REPO / "fixtures" / "4.52" / "full" / "before.py").read_bytes()
AFTER = (REPO / "fixtures" / "4.52" / "full" / "after.py").read_bytes()
COPIES = 40


def before(index: int) -> bytes:
    return BEFORE + f"# copy {index}\n".encode()


def after(index: int) -> bytes:
    return AFTER + f"# copy {index}\n".encode()


def index_of(path: Path) -> int:
    return int(path.stem.removeprefix("modeling_x"))


def is_migrated(path: Path) -> bool:
    return path.read_bytes() == after(index_of(path))


def children(pid: int) -> set[int]:
    """The pids whose parent is ``pid`` (from /proc: psutil is not a dependency)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def fork(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.black]\nline-length = 119\n")
    for index in range(COPIES):
        (tmp_path / f"modeling_x{index:02d}.py").write_bytes(before(index))
    return tmp_path


def start(fork: Path, jobs: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "cachemigrate.cli.main", "migrate", "--era", "4.52", "-j", str(jobs), str(fork)]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def wait_for_first_write(process: subprocess.Popen, fork: Path, jobs: int) -> set[int]:
    """Block until one file is migrated; returns the worker pids (all of them are started by then)."""
    deadline = time.monotonic() + 120
    files = sorted(fork.glob("modeling_*.py"))
    while not any(is_migrated(f) for f in files):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    workers = children(process.pid)
    assert len(workers) >= (jobs if jobs > 1 else 0), workers
    return workers


def check_files(fork: Path, killed: bool = False) -> int:
    """Every file is the original or the migrated version, byte for byte, and no temporary is left (unless the
    process was SIGKILLed in the middle of writing one); returns how many were migrated."""
    files = sorted(fork.glob("modeling_*.py"))
    assert len(files) == COPIES
    assert [f.read_bytes() in (before(index_of(f)), after(index_of(f))) for f in files] == [True] * COPIES
    assert killed or not [p.name for p in fork.iterdir() if p.name.endswith(".cachemigrate")]
    return sum(is_migrated(f) for f in files)


def stop(process: subprocess.Popen, sig: int, group: bool) -> tuple[float, str]:
    sent = time.monotonic()
    if group:  # what a terminal does on Ctrl-C: the whole foreground process group gets SIGINT
        os.killpg(process.pid, sig)
    else:
        process.send_signal(sig)
    try:
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    return time.monotonic() - sent, stderr


@pytest.mark.parametrize(
    "sig, group, jobs",
    [(signal.SIGINT, True, 2), (signal.SIGTERM, False, 2), (signal.SIGINT, False, 1)],
    ids=["ctrl-c-j2", "sigterm-j2", "sigint-j1"],
)
def test_a_signal_stops_the_run_at_once_with_no_orphans_and_no_half_written_file(fork, sig, group, jobs):
    process = start(fork, jobs)
    workers = wait_for_first_write(process, fork, jobs)
    seconds, stderr = stop(process, sig, group)
    assert process.returncode == 128 + sig, stderr
    assert seconds < 5, f"took {seconds:.1f}s to stop"
    assert f"interrupted by {signal.Signals(sig).name}: stopped after" in stderr
    assert "Traceback" not in stderr and "Aborted!" not in stderr
    deadline = time.monotonic() + 2
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in workers if alive(pid)], "worker processes outlived the run"
    migrated = check_files(fork)
    assert 1 <= migrated < COPIES  # it stopped early, and what it wrote is whole


def test_workers_do_not_outlive_a_killed_main_process(fork):
    process = start(fork, 2)
    workers = wait_for_first_write(process, fork, 2)
    process.kill()  # SIGKILL: no handler runs; the workers' parent-death signal ends them
    process.communicate(timeout=30)
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in workers if alive(pid)]
    check_files(fork, killed=True)


def test_a_report_is_written_for_an_interrupted_run(fork):
    report = fork / "report.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "cachemigrate.cli.main", "migrate", "--era", "4.52", "-j", "2", "--report"]
    process = subprocess.Popen(
        [*command, str(report), str(fork)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    wait_for_first_write(process, fork, 2)
    _, stderr = stop(process, signal.SIGTERM, group=False)
    assert process.returncode == 143, stderr
    data = json.loads(report.read_text())
    assert data["interrupted"] == "SIGTERM"
    assert data["counts"]["migrated"] == check_files(fork) == len([f for f in data["files"] if f["changed"]])


def test_a_signal_during_a_write_waits_for_the_write_and_later_signals_are_ignored(tmp_path):
    from cachemigrate.cli.signals import Interrupted, StopOnSignal
    from cachemigrate.source.writing import write_atomically

    target = tmp_path / "m.py"
    target.write_bytes(b"old\n")
    before = signal.getsignal(signal.SIGINT)  # Python's own handler, or SIG_IGN under a shell's background job
    with StopOnSignal() as guard:
        with pytest.raises(Interrupted) as caught:
            with guard.critical():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)  # the handler has run: it only took note
                write_atomically(target, b"new\n")
                os.kill(os.getpid(), signal.SIGINT)  # a second signal while stopping changes nothing
        assert target.read_bytes() == b"new\n"
        assert caught.value.signum == signal.SIGTERM and caught.value.exit_code == 143
    with StopOnSignal():
        with pytest.raises(Interrupted) as caught:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        assert caught.value.exit_code == 130
    assert signal.getsignal(signal.SIGINT) is before  # the handlers are put back


def test_ctrl_c_while_verify_migrates_in_memory_ends_the_workers_and_writes_nothing(fork):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "cachemigrate.cli.main", "verify", "--era", "4.52", "-j", "2", "--tests", "true"]
    process = subprocess.Popen(
        [*command, str(fork)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while len(workers := children(process.pid)) < 2:
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    time.sleep(0.5)  # the workers are migrating the first files
    seconds, stderr = stop(process, signal.SIGINT, group=True)
    assert process.returncode == 130, stderr
    assert seconds < 5 and "interrupted by SIGINT while migrating: nothing was written" in stderr
    deadline = time.monotonic() + 2
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in workers if alive(pid)]
    assert check_files(fork) == 0


def test_sigint_at_j1_while_libcst_parses_a_huge_file_stops_at_once(tmp_path):
    """libcst's parser is native code that no signal handler can interrupt: at -j 1 as at -j 2 the engine runs in
    a worker, so the main process stops it at once. The file is a legacy model with a table of 300,000 numbers
    (seconds of parsing); it is signalled once its worker has started on it."""
    target = tmp_path / "modeling_huge.py"
    target.write_bytes(BEFORE + b"\n\nTABLE = [" + ", ".join(map(str, range(300_000))).encode() + b"]\n")
    original = target.read_bytes()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "cachemigrate.cli.main", "migrate", "--era", "4.52", "-j", "1", str(target)]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while not (workers := children(process.pid)):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.02)
    time.sleep(1)  # the worker is parsing
    assert process.poll() is None
    seconds, stderr = stop(process, signal.SIGINT, group=False)
    assert process.returncode == 130, stderr
    assert seconds < 5, f"took {seconds:.1f}s to stop"
    assert "interrupted by SIGINT: stopped after 0 of 1 files" in stderr
    deadline = time.monotonic() + 2
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in workers if alive(pid)], "the worker outlived the run"
    assert target.read_bytes() == original
