"""What one migration is asked to do and what it gives back: plain data, no libcst.

The command line, the batch loop, the cache and the runner name these without importing the engine, so that a file
the prefilter or the cache answers never costs the import of libcst. :mod:`cachemigrate.engine` re-exports both.
"""

from __future__ import annotations

import dataclasses

from .diagnostics import Diagnostic


@dataclasses.dataclass
class Options:
    """The engine's options: the tier, the width of inserted code, where new parameters go, and so on."""

    tier: str = "dynamic"
    line_length: int | None = None  # None: the file's own width (:mod:`cachemigrate.edit.width`)
    signature: str = "end"  # "end": new parameters go last; "upstream": where the upstream ports put them
    deprecation_version: str | None = None  # the version @deprecate_kwarg names (default: the rule's)
    # rename a generation hook's `past` parameter to `past_key_values` (keeping `past` as an alias) before migrating
    # (cachemigrate.edit.past_hook); without it such a file is refused
    fix_past_hook: bool = False


@dataclasses.dataclass
class FileResult:
    """One file's answer: its text before and after, the status, the diagnostics and the matches per rule."""

    path: str
    original: str
    migrated: str
    # "migrated" | "clean" (nothing legacy) | "skipped" (`# cachemigrate: skip`) | "failed" (diagnostics,
    # unchanged) | "error" (internal)
    status: str
    diagnostics: list[Diagnostic] = dataclasses.field(default_factory=list)
    applied: dict[str, int] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    @property
    def changed(self) -> bool:
        return self.migrated != self.original

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "status": self.status,
            "changed": self.changed,
            "applied": self.applied,
            "seconds": round(self.seconds, 3),
            "diagnostics": [d.to_json() for d in self.diagnostics],
        }
