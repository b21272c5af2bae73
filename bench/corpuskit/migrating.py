"""Migrating the corpus: every PyTorch modeling file through the same bytes-in, bytes-out path as
``cachemigrate migrate`` (:func:`cachemigrate.cli.runner.migrate_bytes`), in parallel processes."""

from __future__ import annotations

import dataclasses
import re
import traceback
from concurrent.futures import ProcessPoolExecutor

from cachemigrate.diagnostics import UNREACHABLE
from cachemigrate.engine import Options
from cachemigrate.rules.loader import load_ruleset
from cachemigrate.cli.runner import migrate_bytes

from .sources import CorpusFile

# A file that imports the Cache classes is on the Cache API already: it must come out clean.
CACHE_API = re.compile(rb"^\s*from\s+(?:\.+|transformers\.)cache_utils\s+import\b", re.M)


@dataclasses.dataclass
class Migration:
    version: str
    relative: str
    model: str
    status: str  # migrated | clean | failed | error (as ``cachemigrate migrate`` says)
    cache_api: bool  # the file imports from cache_utils
    applied: list[str]
    diagnostics: list[str]  # "line:col CODE message"
    migrated: bytes | None = dataclasses.field(default=None, repr=False)

    @property
    def unreachable(self) -> bool:
        """Left unchanged because no model class of the file can reach its tuple-cache code (CM299, exit 0): an
        encoder-only copy of a decoder's attention."""
        return self.status == "clean" and any(f" {UNREACHABLE} " in d for d in self.diagnostics)

    @property
    def tuple_cache(self) -> bool:
        """The engine found a legacy (tuple) use of a cache variable in a file not on the Cache API (reachable or
        not)."""
        return not self.cache_api and (self.status != "clean" or self.unreachable)


_STATE: tuple | None = None


def _init(era: str, tier: str, line_length: int) -> None:
    global _STATE
    _STATE = (load_ruleset(era), Options(tier=tier, line_length=line_length))


def migrate_one(file: CorpusFile) -> Migration:
    return migrate_with(file, *_STATE)


def migrate_with(file: CorpusFile, ruleset, options: Options) -> Migration:
    """One file through ``cachemigrate migrate`` in memory with this rule set and these options."""
    cache_api = bool(CACHE_API.search(file.data))
    try:
        result = migrate_bytes(file.data, ruleset, options, path=file.relative)
    except Exception:  # noqa: BLE001 - reported as a row, never raised
        text = traceback.format_exc(limit=2).strip().replace("\n", " ")
        return Migration(file.version, file.relative, file.model, "error", cache_api, [], [f"internal error: {text}"])
    diagnostics = [f"{d.line}:{d.column} {d.code} {d.message}" for d in result.diagnostics]
    migrated = result.encoded() if result.changed else None
    return Migration(
        file.version,
        file.relative,
        file.model,
        result.status,
        cache_api,
        sorted(result.applied),
        diagnostics,
        migrated,
    )


def migrate_all(files: list[CorpusFile], era: str, tier: str, line_length: int, jobs: int) -> list[Migration]:
    if jobs <= 1:
        _init(era, tier, line_length)
        return [migrate_one(f) for f in files]
    with ProcessPoolExecutor(jobs, initializer=_init, initargs=(era, tier, line_length)) as pool:
        return list(pool.map(migrate_one, files, chunksize=2))
