"""Running the engine over many files: bytes in, bytes out, in parallel jobs that stop at once on a signal.

Each file is first *triaged* in the main process, cheaply and without libcst: its bytes are read and looked up
in the result cache (:mod:`cachemigrate.cli.result_cache`), decoded, checked for ``# cachemigrate: skip`` in its header
(:mod:`cachemigrate.source.suppression`) and put to the prefilter (:mod:`cachemigrate.source.prefilter`). Only a file none of
these can answer goes to the engine, inline (``jobs`` 1) or in a pool of worker processes, started on the first
such file. The rule set is loaded first of all (a bad rule file is a :class:`~cachemigrate.rules.schema.RuleError`
before any file is answered), unless a record says that these very rule files load (:mod:`cachemigrate.rules.checked`:
the package's own, written when it was built, or the user's): then only when a file needs the engine. So a run
where every file is clean or cached does not import libcst.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from .. import diagnostics as codes
from .result_cache import ResultCache, digest
from ..diagnostics import Diagnostic
from ..rules.checked import CheckedRules
from ..rules.eras import cache_names
from ..source.prefilter import nothing_to_migrate
from ..results import FileResult, Options
from ..source.decode import Codec, decode
from ..source.suppression import skips_file

if TYPE_CHECKING:
    from concurrent.futures import Future, ProcessPoolExecutor

    from ..rules.schema import RuleSet

# how a result was reached, for -v
ENGINE, PREFILTER, CACHE, COMMENT, READ = "engine", "prefilter", "cache", "skip comment", "read"


@dataclasses.dataclass
class Result(FileResult):
    """The engine's result for a file, with how to turn the migrated text back into the file's bytes."""

    codec: Codec | None = None  # None: the file could not be read or decoded (see the diagnostics)
    how: str = ENGINE  # what answered: the engine, the prefilter, the cache, the skip comment, the reading
    read_digest: str | None = None  # sha256 of the bytes read, to tell whether the file changed before it is written

    def encoded(self) -> bytes:
        """The bytes of the migrated file: same encoding, BOM and newlines as the original."""
        return self.codec.encode(self.migrated)


def unreadable(path: str, diagnostic: Diagnostic) -> Result:
    """The result for a file that could not be read or decoded: failed, with nothing to write."""
    return Result(path=path, original="", migrated="", status="failed", diagnostics=[diagnostic], how=READ)


def failed(result: Result, diagnostic: Diagnostic) -> Result:
    """``result`` turned into a failure: the original text kept, ``diagnostic`` added."""
    return dataclasses.replace(
        result, migrated=result.original, status="failed", diagnostics=[*result.diagnostics, diagnostic], applied={}
    )


def _with_codec(result: FileResult, codec: Codec, how: str) -> Result:
    fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(FileResult) if f.init}
    return Result(**fields, codec=codec, how=how)


def migrate_bytes(data: bytes, ruleset: "RuleSet", options: Options, path: str = "<bytes>") -> Result:
    """Decode ``data`` like Python would, migrate it with the engine, and check the result encodes back. The
    engine is handed the text with its line breaks as they are; should code it inserts come out with LF in a file
    that uses CRLF (or CR) throughout, those lines get the file's line break too."""
    from ..engine import migrate_source

    source = decode(data, path)
    if isinstance(source, Diagnostic):
        return unreadable(path, source)
    try:
        out = _with_codec(migrate_source(source.text, ruleset, options, path=path), source.codec, ENGINE)
    except RecursionError:  # the guard's depth limit should prevent it: a diagnostic all the same, not a crash
        why = "the file's code is nested too deep for the engine; the file was left unchanged"
        return failed(Result(path, source.text, source.text, "failed", codec=source.codec),
                      Diagnostic(path, 1, 1, codes.TOO_DEEP, why))  # fmt: skip
    if out.changed:
        out.migrated = source.codec.keep_newlines(out.migrated)
        try:
            out.encoded()
        except UnicodeEncodeError as exc:
            line = out.migrated.count("\n", 0, exc.start) + 1
            why = f"the migrated code has {exc.object[exc.start]!r}, which {source.codec.encoding} cannot encode"
            out = failed(out, Diagnostic(path, line, 1, codes.UNWRITABLE, f"{why}; the file was left unchanged"))
    return out


class Triage:
    """What can be said of a file's bytes without the engine (see the module's docstring)."""

    def __init__(self, era: str, cache: ResultCache | None = None) -> None:
        self.names = cache_names(era)
        self.cache = cache

    def answer(self, path: str, data: bytes) -> Result | None:
        """The result, or None when only the engine can tell."""
        started = time.perf_counter()
        source = decode(data, path)
        if isinstance(source, Diagnostic):
            return unreadable(path, source)
        if self.cache is not None:
            hit = self.cache.get(digest(data), path, source.text)
            if hit is not None:
                hit.seconds = time.perf_counter() - started
                return _with_codec(hit, source.codec, CACHE)
        status, how = None, None
        if skips_file(source.text):
            status, how = "skipped", COMMENT
        elif nothing_to_migrate(source.text, self.names):
            status, how = "clean", PREFILTER
        if status is None:
            return None
        result = Result(path, source.text, source.text, status, codec=source.codec, how=how)
        result.seconds = time.perf_counter() - started
        self.remember(data, result)
        return result

    def remember(self, data: bytes, result: Result) -> None:
        if self.cache is not None and result.how not in (CACHE, READ):
            self.cache.put(digest(data), result)


def read(path: str) -> bytes | Result:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        why = f"cannot read the file: {exc.strerror or exc}; the file was left unchanged"
        return unreadable(path, Diagnostic(path, 1, 1, codes.UNREADABLE, why))


def changed_since_read(result: Result) -> bool:
    """The file's bytes on disk are no longer those the result was computed from (an edit while it was being
    migrated); unknown (nothing recorded) counts as unchanged. Checked just before the atomic replace."""
    if result.read_digest is None:
        return False
    try:
        return digest(Path(result.path).read_bytes()) != result.read_digest
    except OSError:
        return True  # gone or unreadable now: not ours to overwrite


def changed_meanwhile(path: str) -> Diagnostic:
    why = (
        "the file changed while it was being migrated: it was left as it is now (the edit is kept); "
        "run cachemigrate again to migrate the new version"
    )
    return Diagnostic(path, 1, 1, codes.CHANGED_MEANWHILE, why)


# Worker state: the rule set of the run, loaded once per process (a forked worker inherits the main process's).
_RULESET: "RuleSet | None" = None
_RULESET_KEY: tuple | None = None


def _set_parent_death_signal() -> None:
    """Linux: a worker gets SIGTERM if the main process dies without stopping it (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux
        pass


def _load(era: str, rule_dirs: tuple[Path, ...], again: bool = True) -> None:
    """Load the rule set (``again``: even if this process has it, as each run reads the rule files anew)."""
    global _RULESET, _RULESET_KEY
    if again or _RULESET_KEY != (era, rule_dirs):
        from ..rules.loader import load_ruleset

        _RULESET, _RULESET_KEY = load_ruleset(era, rule_dirs), (era, rule_dirs)


def _init_worker(era: str, rule_dirs: tuple[Path, ...], in_pool: bool = False) -> None:
    if in_pool:
        # Ctrl-C reaches the whole process group; the main process decides, and stops the workers itself.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _set_parent_death_signal()
    _load(era, rule_dirs, again=not in_pool)


def _migrate(path: str, data: bytes, options: Options) -> Result:
    return migrate_bytes(data, _RULESET, options, path=path)


@dataclasses.dataclass
class Failure:
    """A file the run could not answer: an exception in the engine (an internal error, exit 123)."""

    path: str
    error: str


def _stop(pool: "ProcessPoolExecutor") -> None:
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
    cache: ResultCache | None = None,
    checked: CheckedRules | None = None,
) -> Iterator[Result | Failure]:
    """Migrate every path, the engine in ``jobs`` processes; yields results in completion order. An exception in
    one file is a :class:`Failure` for that file, not the end of the run. An exception in the caller (Ctrl-C,
    SIGTERM, an error in ``on_result``) or closing the generator stops the workers at once. A bad rule file
    raises :class:`~cachemigrate.rules.schema.RuleError` before the engine runs on any file. ``checked``: the records
    of the rule sets known to load (None: the rules are loaded before any file is answered)."""
    paths = [str(p) for p in paths]
    triage = Triage(era, cache)
    engine = _Engine(era, tuple(rule_dirs), options, jobs, len(paths), triage)
    engine.check_rules(checked)
    try:
        for path in paths:
            data = read(path)
            result = data if isinstance(data, Result) else triage.answer(path, data)
            if result is not None:
                if not isinstance(data, Result):
                    result.read_digest = digest(data)
                on_result(result)
                yield result
                continue
            for done in engine.submit(path, data):
                on_result(done)
                yield done
        for done in engine.drain():
            on_result(done)
            yield done
    except BaseException:
        engine.stop()
        raise
    engine.close()


class _Engine:
    """The files only the engine can answer: in a pool of ``jobs`` worker processes (one for -j 1) started on the
    first such file, with at most two files per worker queued (on a signal little is left to cancel)."""

    def __init__(self, era, rule_dirs, options, jobs, total, triage: Triage) -> None:
        self.era, self.rule_dirs, self.options, self.jobs, self.total = era, rule_dirs, options, jobs, total
        self.triage = triage
        self.pool: "ProcessPoolExecutor | None" = None
        self.pending: "dict[Future, tuple[str, bytes]]" = {}
        self.loaded = False

    def check_rules(self, checked: CheckedRules | None) -> None:
        """Load the rule set now (a bad rule file raises RuleError before any file is answered), unless a record
        says these rule files load: then only when the first file needs the engine."""
        if checked is not None and checked.known(self.era, self.rule_dirs):
            return
        self._load()
        if checked is not None:
            checked.remember(self.era, self.rule_dirs)

    def _load(self) -> None:
        if not self.loaded:
            _load(self.era, self.rule_dirs)
            self.loaded = True

    def _finish(self, path: str, data: bytes, compute: Callable[[], Result]) -> Result | Failure:
        try:
            result = compute()
        except Exception as exc:  # reported per file; the run goes on
            return Failure(path, f"{type(exc).__name__}: {exc}")
        self.triage.remember(data, result)
        result.read_digest = digest(data)
        return result

    def submit(self, path: str, data: bytes) -> Iterator[Result | Failure]:
        """The engine runs in worker processes even for one job: libcst's parser is native code that a signal
        cannot interrupt, so only a main process that waits on its workers stops at once on Ctrl-C/SIGTERM."""
        self._load()  # in this process first (a forked pool inherits it)
        if self.pool is None:
            from concurrent.futures import ProcessPoolExecutor  # only a run that needs one pays for its import

            self.pool = ProcessPoolExecutor(
                max_workers=max(1, min(self.jobs, self.total)),
                initializer=_init_worker,
                initargs=(self.era, self.rule_dirs, True),
            )
        while len(self.pending) >= 2 * self.jobs:
            yield from self._completed()
        self.pending[self.pool.submit(_migrate, path, data, self.options)] = (path, data)

    def _completed(self) -> Iterator[Result | Failure]:
        from concurrent.futures import FIRST_COMPLETED, wait

        done, _ = wait(self.pending, return_when=FIRST_COMPLETED)
        for future in done:
            path, data = self.pending.pop(future)
            yield self._finish(path, data, future.result)

    def drain(self) -> Iterator[Result | Failure]:
        while self.pending:
            yield from self._completed()

    def stop(self) -> None:
        if self.pool is not None:
            _stop(self.pool)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)


def migrate_one(path: str, data: bytes, era: str, rule_dirs: tuple[Path, ...], options: Options,
                cache: ResultCache | None = None,
                checked: CheckedRules | None = None) -> Result | Failure:  # fmt: skip
    """One file's bytes (standard input): triaged, else migrated by the engine (in a worker, as for a run)."""
    triage = Triage(era, cache)
    engine = _Engine(era, tuple(rule_dirs), options, 1, 1, triage)
    engine.check_rules(checked)
    result = triage.answer(path, data)
    if result is not None:
        return result
    try:
        [done] = [*engine.submit(path, data), *engine.drain()]
    except BaseException:
        engine.stop()
        raise
    engine.close()
    return done
