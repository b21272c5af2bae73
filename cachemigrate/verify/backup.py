"""Keeping the originals safe: their bytes in memory and on disk, put back on a regression or a signal."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

from ..cli.signals import Interrupted
from ..source.writing import write_atomically


class Backup:
    """The original bytes of the files about to change, in memory and in ``folder`` (with a MANIFEST)."""

    def __init__(self, paths: list[Path], folder: Path) -> None:
        self.originals = {path: path.read_bytes() for path in paths}
        folder.mkdir(parents=True)
        manifest = []
        for index, (path, data) in enumerate(self.originals.items()):
            (folder / f"{index}-{path.name}").write_bytes(data)
            manifest.append(f"{index}-{path.name}\t{path.resolve()}")
        (folder / "MANIFEST.txt").write_text("\n".join(manifest) + "\n", encoding="utf-8")

    def restore(self) -> list[Path]:
        """Put back, atomically, every file whose bytes differ from the original; returns those restored."""
        restored = []
        for path, data in self.originals.items():
            if not path.exists():
                path.write_bytes(data)
            elif path.read_bytes() != data:
                write_atomically(path, data)
            else:
                continue
            restored.append(path)
        return restored


def _raise_interrupted(signum, frame) -> None:
    """The SIGINT/SIGTERM handler: ignore further signals, then unwind through the restoring ``finally``."""
    for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal must not break the restore
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(signum)


def _install_handlers() -> dict:
    """Make SIGINT and SIGTERM raise :class:`Interrupted`; returns the previous handlers (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, _raise_interrupted) for sig in (signal.SIGINT, signal.SIGTERM)}
