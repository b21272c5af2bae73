"""Rendering and formatting: black for the code the tool inserts or edits (never the whole file), and diffs.

black is imported on first use: a run that formats nothing (every file clean, cached, or only diffed from the
cache) never pays for it."""

from __future__ import annotations

import difflib
import functools


@functools.lru_cache(maxsize=None)
def _mode(line_length: int):
    import black

    return black.Mode(line_length=line_length)


def format_statements(code: str, depth: int, line_length: int) -> str:
    """Black-format statements that will be inserted ``depth`` levels deep."""
    import black

    try:
        return black.format_str(code, mode=_mode(max(40, line_length - 4 * depth)))
    except black.InvalidInput:  # pragma: no cover - templates are valid Python, checked on load
        return code


def unified_diff(path: str, before: str, after: str) -> str:
    """A unified diff; relative paths get git's a/ and b/ prefixes (so ``git apply`` takes it)."""
    old, new = (path, path) if path.startswith("/") else (f"a/{path}", f"b/{path}")
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), old, new))
