"""``cachemigrate migrate`` on files whose bytes must survive: CRLF, a BOM, latin-1, read-only files, symlinks,
binary files, and an unwritable ``--report``."""

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from cachemigrate.cli.main import main
from conftest import summary_of

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BEFORE = (FIXTURES / "4.52" / "full" / "before.py").read_bytes()
AFTER = (FIXTURES / "4.52" / "full" / "after.py").read_bytes()
BOM = b"\xef\xbb\xbf"
LATIN1 = b"# -*- coding: latin-1 -*-\n# Auteur: Ren\xe9\n"


def cli(*args):
    return CliRunner().invoke(main, ["migrate", "--era", "4.52", *map(str, args)])


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.black]\nline-length = 119\n")  # the fixtures' line length
    return tmp_path


@pytest.mark.parametrize(
    "name, before, after",
    [
        ("crlf", BEFORE.replace(b"\n", b"\r\n"), AFTER.replace(b"\n", b"\r\n")),
        ("bom", BOM + BEFORE, BOM + AFTER),
        ("latin1", LATIN1 + BEFORE, LATIN1 + AFTER),
        ("bom_crlf", BOM + BEFORE.replace(b"\n", b"\r\n"), BOM + AFTER.replace(b"\n", b"\r\n")),
    ],
)
def test_line_endings_bom_and_declared_encoding_survive(folder, name, before, after):
    target = folder / f"modeling_{name}.py"
    target.write_bytes(before)
    result = cli(target)
    assert result.exit_code == 0, result.output
    assert target.read_bytes() == after  # the inserted lines have the file's line ending too
    assert cli("--check", target).exit_code == 0  # and a second run finds nothing to do


def test_diff_of_a_crlf_file_shows_only_the_real_changes(folder):
    target = folder / "modeling_crlf.py"
    target.write_bytes(BEFORE.replace(b"\n", b"\r\n"))
    diff = cli("--diff", target).stdout
    removed = [line for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    assert 0 < len(removed) < 20  # not every line of the file
    assert target.read_bytes() == BEFORE.replace(b"\n", b"\r\n")


def test_a_read_only_file_is_reported_and_left_alone_with_exit_1(folder):
    target = folder / "modeling_ro.py"
    target.write_bytes(BEFORE)
    other = folder / "modeling_rw.py"
    other.write_bytes(BEFORE)
    target.chmod(0o444)
    result = cli("--report", folder / "r.json", folder)
    assert result.exit_code == 1, result.output
    assert f"{target}:1:1: CM905 the file is read-only: it was not rewritten" in result.stdout
    assert target.read_bytes() == BEFORE and stat.S_IMODE(target.stat().st_mode) == 0o444
    assert other.read_bytes() == AFTER  # the others are migrated
    data = json.loads((folder / "r.json").read_text())
    assert data["counts"] == {"migrated": 1, "clean": 0, "skipped": 0, "failed": 1, "error": 0}
    # --check and --diff write nothing, so a read-only file is checked like any other
    assert cli("--check", target).exit_code == 1 and "CM905" not in cli("--check", target).stdout


def test_a_symlink_stays_a_symlink_and_its_target_is_migrated_keeping_its_mode(folder, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    real = elsewhere / "modeling_real.py"
    real.write_bytes(BEFORE)
    real.chmod(0o640)
    link = folder / "modeling_link.py"
    link.symlink_to(real)
    result = cli(link)
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_bytes() == AFTER and stat.S_IMODE(real.stat().st_mode) == 0o640
    assert [p.name for p in elsewhere.iterdir()] == ["modeling_real.py"]  # no temporary file left next to it


@pytest.mark.parametrize(
    "data, message",
    [
        (b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)), "CM904 not a text file (it contains a NUL byte)"),
        (b"# caf\xe9\n" + BEFORE, "CM904 cannot decode byte 0xe9 as utf-8 (no coding comment)"),
        (b"# -*- coding: klingon -*-\n" + BEFORE, "CM904 cannot read the file's encoding: unknown encoding: klingon"),
    ],
)
def test_binary_and_undecodable_files_are_a_diagnostic_and_exit_1_not_an_internal_error(folder, data, message):
    target = folder / "modeling_bin.py"
    target.write_bytes(data)
    good = folder / "modeling_good.py"
    good.write_bytes(BEFORE)
    result = cli(folder)
    assert result.exit_code == 1, result.output
    assert message in result.stdout
    assert "internal error:" not in result.output and "internal errors" not in summary_of(result.stderr)
    assert target.read_bytes() == data and good.read_bytes() == AFTER


def test_an_unreadable_file_is_a_diagnostic(folder):
    target = folder / "modeling_dangling.py"
    target.symlink_to(folder / "missing.py")
    result = cli(target)
    assert result.exit_code == 1, result.output
    assert f"{target}:1:1: CM904 cannot read the file: No such file or directory" in result.stdout


@pytest.mark.parametrize("where", ["missing_dir", "is_a_dir"])
def test_an_unwritable_report_exits_2_before_any_file_is_written(folder, where):
    target = folder / "modeling_x.py"
    target.write_bytes(BEFORE)
    report = folder / "no" / "such" / "r.json" if where == "missing_dir" else folder
    result = cli("--report", report, target)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: --report {report}: ")
    assert target.read_bytes() == BEFORE


def test_an_edit_made_while_the_file_is_migrated_is_kept(folder, monkeypatch):
    """The engine takes its time; the user saves the file meanwhile: their edit wins, and they are told."""
    from cachemigrate.cli import runner

    target = folder / "modeling_x.py"
    target.write_bytes(BEFORE)
    edited = BEFORE + b"\n# saved by the user while the migration ran\n"
    engine = runner.migrate_bytes

    def slow_engine(data, *args, **kwargs):
        result = engine(data, *args, **kwargs)
        target.write_bytes(edited)
        return result

    monkeypatch.setattr(runner, "migrate_bytes", slow_engine)
    result = cli(target)
    assert result.exit_code == 1, result.output
    assert target.read_bytes() == edited
    assert f"{target}:1:1: CM909 the file changed while it was being migrated" in result.stdout
    assert summary_of(result.stderr) == {"left unchanged (diagnostics)": 1}
    monkeypatch.setattr(runner, "migrate_bytes", engine)
    again = cli(target)  # the next run migrates the edited file
    assert again.exit_code == 0 and target.read_bytes() == AFTER + b"\n# saved by the user while the migration ran\n"


def test_a_fifo_as_report_is_written_into_and_stays_a_fifo(folder):
    import threading

    target = folder / "modeling_x.py"
    target.write_bytes(BEFORE)
    fifo = folder / "report.fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    result = cli("--report", fifo, target)
    assert result.exit_code == 0, result.output
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # not renamed over by a regular file
    reader.join(30)
    assert received and json.loads(received[0])["counts"]["migrated"] == 1


def test_a_device_as_report_is_written_into_and_stays_a_device(folder):
    """A null device of the test's own (mknod, as root): the machine's /dev/null is never at risk."""
    device = folder / "null"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError) as exc:
        pytest.skip(f"cannot make a device node here: {exc}")
    target = folder / "modeling_x.py"
    target.write_bytes(BEFORE)
    result = cli("--report", device, target)
    assert result.exit_code == 0, result.output
    assert stat.S_ISCHR(os.lstat(device).st_mode) and os.stat(device).st_rdev == os.makedev(1, 3)
    assert target.read_bytes() == AFTER


@pytest.mark.parametrize("stdout", ["a pipe", "a file"])
def test_a_report_through_a_symlink_to_stdout(folder, stdout):
    """``--report /dev/stdout``: into the pipe, or into the very file the shell opened (not a new one put in its
    place, which would lose whatever else the run writes to standard output)."""
    import subprocess
    import sys

    target = folder / "modeling_x.py"
    target.write_bytes(BEFORE)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    command = [sys.executable, "-m", "cachemigrate.cli.main", "migrate", "--era", "4.52", "-q", "--check",
               "--report", "/dev/stdout", str(target)]  # fmt: skip
    if stdout == "a pipe":
        done = subprocess.run(command, capture_output=True, env=env, timeout=300)
        written = done.stdout
    else:
        redirected = folder / "out.json"
        with open(redirected, "wb") as stream:
            inode = os.fstat(stream.fileno()).st_ino
            done = subprocess.run(command, stdout=stream, stderr=subprocess.PIPE, env=env, timeout=300)
        assert os.stat(redirected).st_ino == inode  # written through, not replaced
        written = redirected.read_bytes()
    assert done.returncode == 1, done.stderr  # --check: the file would change
    assert json.loads(written)["files"][0]["status"] == "migrated"


def test_a_report_on_a_full_disk_is_an_error_after_the_summary_not_an_internal_error(folder):
    if not os.path.exists("/dev/full") or not stat.S_ISCHR(os.stat("/dev/full").st_mode):
        pytest.skip("no /dev/full device here")
    target = folder / "modeling_x.py"
    target.write_bytes(BEFORE)
    result = cli("--report", "/dev/full", target)
    assert result.exit_code == 1, result.output
    assert "error: --report /dev/full: cannot write the report: No space left on device" in result.stderr
    assert "internal error" not in result.output
    assert summary_of(result.stderr) == {"migrated": 1}  # the summary is still shown
    assert target.read_bytes() == AFTER


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write in a read-only folder")
def test_a_report_in_a_read_only_folder_exits_2(folder):
    target = folder / "modeling_x.py"
    target.write_bytes(BEFORE)
    locked = folder / "locked"
    locked.mkdir(mode=0o500)
    result = cli("--report", locked / "r.json", target)
    assert result.exit_code == 2 and target.read_bytes() == BEFORE


def test_a_failed_write_is_a_diagnostic_and_the_file_is_unchanged(folder, monkeypatch):
    target = folder / "modeling_x.py"
    target.write_bytes(BEFORE)

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("cachemigrate.cli.batch.write_atomically", full_disk)
    result = cli(target)
    assert result.exit_code == 1
    assert f"{target}:1:1: CM906 cannot write the file: No space left on device" in result.stdout
    assert target.read_bytes() == BEFORE


def test_write_atomically_keeps_the_old_bytes_when_writing_fails(tmp_path, monkeypatch):
    from cachemigrate.source import writing

    target = tmp_path / "m.py"
    target.write_bytes(b"old\n")

    def fail(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(writing.os, "replace", fail)
    with pytest.raises(KeyboardInterrupt):
        writing.write_atomically(target, b"new\n")
    assert target.read_bytes() == b"old\n" and [p.name for p in tmp_path.iterdir()] == ["m.py"]


def test_verify_restores_a_latin1_file_byte_for_byte(tmp_path):
    fork = tmp_path / "fork"
    shutil.copytree(FIXTURES / "tinyfork", fork)
    modeling = fork / "tinyfork" / "modeling_tinyfork.py"
    original = LATIN1 + modeling.read_bytes()
    modeling.write_bytes(original)
    (fork / "tests" / "test_breaks.py").write_text(
        "import pathlib\n\n\ndef test_unchanged():\n"
        "    assert b'DynamicCache' not in (pathlib.Path(__file__).parents[1] / 'tinyfork' / "
        "'modeling_tinyfork.py').read_bytes()\n"
    )
    result = CliRunner().invoke(
        main, ["verify", "--era", "4.52", "--tests", "python -m pytest tests/test_breaks.py", str(fork)]
    )
    assert result.exit_code == 1, result.output
    assert "restored the original bytes of 1 file(s)" in result.output
    assert modeling.read_bytes() == original
