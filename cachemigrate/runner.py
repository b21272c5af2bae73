"""Running the engine over many files: bytes in, bytes out, in parallel jobs that stop at once on a signal."""

from __future__ import annotations

import dataclasses
import signal
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Callable, Iterable, Iterator

from . import diagnostics as codes
from .diagnostics import Diagnostic
from .engine import FileResult, Options, migrate_source
from .rules import RuleSet, load_ruleset
from .source import Codec, decode


@dataclasses.dataclass
class Result(FileResult):
    """The engine's result for a file, with how to turn the migrated text back into the file's bytes."""

    codec: Codec | None = None  # None: the file could not be read or decoded (see the diagnostics)

    def encoded(self) -> bytes:
        """The bytes of the migrated file: same encoding, BOM and newlines as the original."""
        return self.codec.encode(self.migrated)


def unreadable(path: str, diagnostic: Diagnostic) -> Result:
    """The result for a file that could not be read or decoded: failed, with nothing to write."""
    return Result(path=path, original="", migrated="", status="failed", diagnostics=[diagnostic])


def failed(result: Result, diagnostic: Diagnostic) -> Result:
    """``result`` turned into a failure: the original text kept, ``diagnostic`` added."""
    return dataclasses.replace(
        result, migrated=result.original, status="failed", diagnostics=[*result.diagnostics, diagnostic], applied={}
    )


def migrate_bytes(data: bytes, ruleset: RuleSet, options: Options, path: str = "<bytes>") -> Result:
    """Decode ``data`` like Python would, migrate it, and check the result encodes back. The engine is handed the
    text with its line breaks as they are; should code it inserts come out with LF in a file that uses CRLF (or CR)
    throughout, those lines get the file's line break too."""
    source = decode(data, path)
    if isinstance(source, Diagnostic):
        return unreadable(path, source)
    result = migrate_source(source.text, ruleset, options, path=path)
    fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(FileResult) if f.init}
    out = Result(**fields, codec=source.codec)
    if out.changed:
        out.migrated = source.codec.keep_newlines(out.migrated)
        try:
            out.encoded()
        except UnicodeEncodeError as exc:
            line = out.migrated.count("\n", 0, exc.start) + 1
            why = f"the migrated code has {exc.object[exc.start]!r}, which {source.codec.encoding} cannot encode"
            out = failed(out, Diagnostic(path, line, 1, codes.UNWRITABLE, f"{why}; the file was left unchanged"))
    return out


# Worker state for process pools: the rule set is loaded once per process.
_RULESET: RuleSet | None = None


def _set_parent_death_signal() -> None:
    """Linux: a worker gets SIGTERM if the main process dies without stopping it (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux
        pass


def _init_worker(era: str, rule_dirs: tuple[Path, ...], in_pool: bool = False) -> None:
    global _RULESET
    if in_pool:
        # Ctrl-C reaches the whole process group; the main process decides, and stops the workers itself.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _set_parent_death_signal()
    _RULESET = load_ruleset(era, rule_dirs)


def _migrate_path(path: str, options: Options) -> Result:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        why = f"cannot read the file: {exc.strerror or exc}; the file was left unchanged"
        return unreadable(path, Diagnostic(path, 1, 1, codes.UNREADABLE, why))
    return migrate_bytes(data, _RULESET, options, path=path)


@dataclasses.dataclass
class Failure:
    path: str
    error: str


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and end the workers now (SIGTERM, then SIGKILL): no orphan outlives the run."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + 2.0
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join(1.0)


def run(
    paths: Iterable[Path],
    era: str,
    rule_dirs: tuple[Path, ...],
    options: Options,
    jobs: int = 1,
    on_result: Callable[[Result | Failure], None] = lambda r: None,
) -> Iterator[Result | Failure]:
    """Migrate every path, in ``jobs`` processes; yields results in completion order. An exception in one file is
    a :class:`Failure` for that file, not the end of the run. An exception in the caller (Ctrl-C, SIGTERM, an
    error in ``on_result``) or closing the generator stops the workers at once."""
    paths = [str(p) for p in paths]
    if jobs <= 1 or len(paths) <= 1:
        _init_worker(era, rule_dirs)
        for path in paths:
            try:
                result = _migrate_path(path, options)
            except Exception as exc:  # reported per file; the run goes on
                result = Failure(path, f"{type(exc).__name__}: {exc}")
            on_result(result)
            yield result
        return
    workers = min(jobs, len(paths))
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_init_worker, initargs=(era, rule_dirs, True))
    try:
        # at most two files per worker queued at a time: on a signal little is left to cancel
        pending: dict[Future, str] = {}
        queue = list(reversed(paths))
        while queue or pending:
            while queue and len(pending) < 2 * workers:
                path = queue.pop()
                pending[pool.submit(_migrate_path, path, options)] = path
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                path = pending.pop(future)
                try:
                    result = future.result()
                except Exception as exc:
                    result = Failure(path, f"{type(exc).__name__}: {exc}")
                on_result(result)
                yield result
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown(wait=True)
