"""bench/runtimes.py says when the package index has a newer 5.x than the runtime it pins (5.x ships weekly)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import runtimes  # noqa: E402

LISTING = "transformers (6.0.0rc1)\nAvailable versions: 5.26.1, 5.26.0, 5.25.0, 5.9.0, 4.57.6, 6.0.0rc1\n"


def test_the_newest_final_release_of_a_major_version():
    assert runtimes.newest("5", LISTING) == "5.26.1"  # 5.26.1 > 5.9.0 as versions, not as text
    assert runtimes.newest("4", LISTING) == "4.57.6"
    assert runtimes.newest("6", LISTING) is None  # a release candidate is not a release
    assert runtimes.newest("5", "ERROR: no network") is None


def _fake(listing):
    def run(command, **kwargs):
        return subprocess.CompletedProcess(command, 0, stdout=listing, stderr="")

    return run


def test_a_newer_5x_on_the_index_is_said_and_none_is_quiet(capsys):
    pinned = runtimes.RUNTIMES["tf525"][0]
    major, minor = pinned.split(".")[:2]
    later = f"{major}.{int(minor) + 1}.0"
    runtimes.warn_if_stale(_fake(f"Available versions: {later}, {pinned}, 4.57.6\n"))
    assert f"transformers {later} is out, newer than the pinned {pinned}" in capsys.readouterr().err
    runtimes.warn_if_stale(_fake(f"Available versions: {pinned}, 4.57.6\n"))
    assert capsys.readouterr().err == ""

    def offline(command, **kwargs):
        raise subprocess.TimeoutExpired(command, 60)

    runtimes.warn_if_stale(offline)
    assert capsys.readouterr().err == ""
