"""Running the engine over many files: collecting paths, parallel jobs, writing results safely."""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import tempfile
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from .engine import FileResult, Options, migrate_source
from .rules import RuleSet, load_ruleset


def collect(paths: Sequence[Path], include: Sequence[str], exclude: Sequence[str]) -> list[Path]:
    """Files named on the command line are always taken; directories are searched for ``include`` globs."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            for candidate in sorted(path.rglob("*.py")):
                relative = str(candidate.relative_to(path))
                if any(fnmatch.fnmatch(candidate.name, pat) for pat in include) and not any(
                    fnmatch.fnmatch(relative, pat) or fnmatch.fnmatch(candidate.name, pat) for pat in exclude
                ):
                    found.append(candidate)
        elif path.exists():
            found.append(path)
        else:
            raise FileNotFoundError(f"{path}: no such file or directory")
    return list(dict.fromkeys(found))


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` in one step (a crash never leaves half a file), keeping its permissions."""
    mode = path.stat().st_mode & 0o7777
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".cachemigrate")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            stream.write(text)
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


# Worker state for process pools: the rule set is loaded once per process.
_RULESET: RuleSet | None = None


def _init_worker(era: str, rule_dirs: tuple[Path, ...]) -> None:
    global _RULESET
    _RULESET = load_ruleset(era, rule_dirs)


def _migrate_path(path: str, options: Options) -> FileResult:
    text = Path(path).read_text(encoding="utf-8")
    return migrate_source(text, _RULESET, options, path=path)


@dataclasses.dataclass
class Failure:
    path: str
    error: str


def run(
    paths: Iterable[Path],
    era: str,
    rule_dirs: tuple[Path, ...],
    options: Options,
    jobs: int = 1,
    on_result: Callable[[FileResult | Failure], None] = lambda r: None,
) -> Iterator[FileResult | Failure]:
    """Migrate every path, in ``jobs`` processes; yields results in completion order. An exception in one file
    is a :class:`Failure` for that file, not the end of the run."""
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
    with ProcessPoolExecutor(max_workers=jobs, initializer=_init_worker, initargs=(era, rule_dirs)) as pool:
        futures = {pool.submit(_migrate_path, path, options): path for path in paths}
        for future in as_completed(futures):
            try:
                result = future.result()
            except Exception as exc:
                result = Failure(futures[future], f"{type(exc).__name__}: {exc}")
            on_result(result)
            yield result
