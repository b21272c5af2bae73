"""A cache of results keyed by the file's bytes, like black's: a re-run on an unchanged tree answers from it.

A result depends on the file's bytes and on nothing else but the *context*: the tool (its version and the bytes of
its own code), the era, the tier, the engine options, and the bytes of every rule file of the rule set. The
context is one digest, a folder of the cache; each entry is a small JSON file named by the digest of the file's
bytes, written atomically, so that runs in parallel (pre-commit starts several) share it safely. An entry holds
the status, the matches per rule, the diagnostics (without the path, which is the caller's) and, for a file that
would change, the migrated text.

That the rule files load is recorded beside the contexts, in ``checked-rules/`` (:mod:`cachemigrate.rules.checked`,
whatever ``--no-cache`` says). What is never stored: internal errors, and results that depend on more than the
bytes (a read-only file, a failed write, an unreadable file). A damaged or foreign entry is a miss.

Where: ``$CACHEMIGRATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/cachemigrate``, else ``~/.cache/cachemigrate``;
``--no-cache`` (or ``CACHEMIGRATE_CACHE_DIR=""``... any empty value) turns it off. Old contexts are pruned: the
eight most recently used are kept.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from .. import __version__
from ..diagnostics import Diagnostic
from ..rules.checked import FOLDER as CHECKED_RULES, code_fingerprint
from ..rules.eras import fingerprint
from ..results import FileResult, Options

FORMAT = 1  # the entry layout; part of the context
KEEP_CONTEXTS = 8
CACHED_STATUSES = frozenset({"clean", "skipped", "migrated", "failed"})
NOT_FROM_BYTES = frozenset({"CM905", "CM906", "CM909"})  # read-only, failed write, edited meanwhile: not the bytes


def default_dir() -> Path | None:
    """The cache folder from the environment; None when ``CACHEMIGRATE_CACHE_DIR`` is set and empty."""
    chosen = os.environ.get("CACHEMIGRATE_CACHE_DIR")
    if chosen is not None:
        return Path(chosen) if chosen else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cachemigrate"


def context_key(era: str, rule_dirs: tuple[Path, ...], options: Options) -> str:
    parts = {
        "format": FORMAT,
        "version": __version__,
        "code": code_fingerprint(),
        "era": era,
        "rules": fingerprint(era, tuple(rule_dirs)),
        "options": dataclasses.asdict(options),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ResultCache:
    """Entries of one context. Every method is best effort: a cache that cannot be read or written is a miss."""

    def __init__(self, root: Path, context: str) -> None:
        self.folder = Path(root) / context
        self._pruned = False

    @classmethod
    def open(cls, root: Path | None, era: str, rule_dirs: tuple[Path, ...], options: Options) -> "ResultCache | None":
        if root is None:
            return None
        return cls(root, context_key(era, rule_dirs, options))

    def _entry(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str, path: str, original: str) -> FileResult | None:
        """The stored result for bytes with digest ``key``, for the file at ``path`` whose text is ``original``."""
        try:
            entry = json.loads(self._entry(key).read_text(encoding="utf-8"))
            status = entry["status"]
            if status not in CACHED_STATUSES:
                return None
            diagnostics = [
                Diagnostic(path, line, column, code, message) for line, column, code, message in entry["diagnostics"]
            ]
            migrated = entry.get("migrated")
            return FileResult(
                path=path,
                original=original,
                migrated=original if migrated is None else migrated,
                status=status,
                diagnostics=diagnostics,
                applied={str(k): int(v) for k, v in entry["applied"].items()},
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, key: str, result: FileResult) -> None:
        if result.status not in CACHED_STATUSES or any(d.code in NOT_FROM_BYTES for d in result.diagnostics):
            return
        entry = {
            "status": result.status,
            "applied": result.applied,
            "diagnostics": [[d.line, d.column, d.code, d.message] for d in result.diagnostics],
        }
        if result.changed:
            entry["migrated"] = result.migrated
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._prune()
            handle, temp = tempfile.mkstemp(dir=self.folder, prefix=".entry.", suffix=".tmp")
            with os.fdopen(handle, "w", encoding="utf-8") as stream:
                json.dump(entry, stream)
            os.replace(temp, self._entry(key))
        except OSError:
            pass

    def _prune(self) -> None:
        """Keep the most recently used contexts (this one included); an old one goes whole."""
        if self._pruned:
            return
        self._pruned = True
        try:
            os.utime(self.folder)
            folders = (p for p in self.folder.parent.iterdir() if p.is_dir() and p.name != CHECKED_RULES)
            contexts = sorted(folders, key=lambda p: p.stat().st_mtime, reverse=True)
        except OSError:
            return
        for old in contexts[KEEP_CONTEXTS:]:
            shutil.rmtree(old, ignore_errors=True)
