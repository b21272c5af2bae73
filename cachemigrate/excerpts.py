"""Short quotes of the user's code for diagnostics: one physical line, as written, without its comment.

A statement that spans several lines is never flattened onto one: the quote is the line that holds the construct,
cut at a word boundary if it is long."""

from __future__ import annotations

import io
import tokenize

LIMIT = 100


def source_line(code: str, line: int, limit: int = LIMIT) -> str:
    """Line ``line`` (1-based) of ``code``, stripped, without a trailing comment, at most ``limit`` characters."""
    lines = code.splitlines()
    if not 1 <= line <= len(lines):
        return ""
    text = _without_comment(lines[line - 1]).strip()
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit - 1)
    return text[: cut if cut > limit // 2 else limit - 1].rstrip() + " …"


def quote(text: str, limit: int = LIMIT) -> str:
    """An idiom (code with its layout normalised onto one line) as a short quote: without the comment that
    flattening carried into it, at most ``limit`` characters, with `` …`` where something was left out."""
    kept = _without_comment(text).strip()
    first = source_line(kept, 1, limit)
    return first if kept == text.strip() or first.endswith(" …") else first + " …"


def _without_comment(text: str) -> str:
    if "#" not in text:
        return text
    try:
        for token in tokenize.generate_tokens(io.StringIO(text.lstrip() + "\n").readline):
            if token.type == tokenize.COMMENT:
                return text[: len(text) - len(text.lstrip()) + token.start[1]].rstrip()
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # a line of an unfinished bracket: tokenize cannot tell a comment from a string, keep the line
    return text
