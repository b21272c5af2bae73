"""The line length of inserted code when no ``--line-length`` and no ``[tool.black]``/``[tool.ruff]`` says it: the
file's own width, read from its code lines.

Only lines a formatter could have wrapped count: a line with a comment or a string on it can be longer than the
width the file was formatted at (black never splits strings or comments). The longest of the others is snapped up
to the nearest common width; a file whose code lines are all short says nothing, and gets black's default. Pure
text: nothing here imports libcst or black."""

from __future__ import annotations

import dataclasses
import io
import tokenize

COMMON = (79, 88, 99, 100, 119, 120)  # PEP 8, black's default, and the widths projects set most
DEFAULT = 88  # black's
_NOT_WRAPPED = {
    getattr(tokenize, name)
    for name in ("COMMENT", "STRING", "FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")
    if hasattr(tokenize, name)
}
_QUIET = 76  # the longest code line is no longer than this: the file shows no width at all


@dataclasses.dataclass(frozen=True)
class Width:
    columns: int
    why: str  # for -v: where the number comes from


def infer_width(code: str) -> Width:
    """The width ``code`` was written at: the smallest common width that holds every code line that a formatter
    could have wrapped (no comment, no string on it); black's 88 when none is longer than 76 characters."""
    lengths = code_line_lengths(code)
    longest = max(lengths, default=0)
    if longest <= _QUIET:
        return Width(DEFAULT, f"no code line is longer than {longest} characters, so black's default {DEFAULT}")
    fits = [width for width in COMMON if width >= longest]
    if fits:
        return Width(fits[0], f"its longest code line with no comment or string is {longest} characters")
    # none holds them all: a file not formatted at any common width; the widest one is the least surprising
    return Width(COMMON[-1], f"its longest code line is {longest} characters, wider than every common width")


def code_line_lengths(code: str) -> list[int]:
    """Lengths of the physical lines that hold code and no comment or string (empty list if it does not
    tokenize)."""
    lines = code.splitlines()
    skip: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(code).readline):
            if token.type in _NOT_WRAPPED:
                skip.update(range(token.start[0], token.end[0] + 1))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return []
    return [len(line.rstrip()) for number, line in enumerate(lines, 1) if number not in skip and line.strip()]


def width_note(line_length: int | None, code: str) -> str:
    """What ``-v`` says about the width of a file's inserted code."""
    if line_length is not None:
        return f"width {line_length}, from --line-length or the config"
    width = infer_width(code)
    return f"width {width.columns}, the file's own ({width.why}; no --line-length, none in pyproject.toml)"
