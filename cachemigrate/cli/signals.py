"""SIGINT and SIGTERM during a run: stop at once, but never in the middle of writing a file.

Inside :class:`StopOnSignal` the first SIGINT or SIGTERM raises :class:`Interrupted` in the main thread (a
BaseException, so no ``except Exception`` swallows it); later ones are ignored while the run unwinds. Inside
``critical()`` (a file being written) the signal waits until the block is over.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 + the signal number, as a shell reports a process the signal killed: 130 for SIGINT, 143 SIGTERM."""
        return 128 + self.signum


class StopOnSignal:
    def __init__(self) -> None:
        self.received: int | None = None
        self._critical = 0
        self._previous: dict = {}

    def __enter__(self) -> "StopOnSignal":
        if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread only
            self._previous = {sig: signal.signal(sig, self._handle) for sig in SIGNALS}
        return self

    def __exit__(self, *exc_info) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _handle(self, signum, frame) -> None:
        if self.received is not None:
            return  # the run is already stopping
        self.received = signum
        if not self._critical:
            raise Interrupted(signum)

    @contextlib.contextmanager
    def critical(self) -> Iterator[None]:
        """A block that a signal does not cut short: it is raised when the block ends."""
        self._critical += 1
        try:
            yield
        finally:
            self._critical -= 1
        if not self._critical and self.received is not None:
            raise Interrupted(self.received)
