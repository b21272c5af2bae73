"""``# cachemigrate: skip``: a file, or a statement, that the user wants left alone.

* **A file**: the comment on a line of its own in the file's header, that is before the first ``class``, ``def``
  or decorator at the start of a line (beside the license, the docstring and the imports). The file is reported
  ``skipped`` and left as it is.
* **A statement**: the comment at the end of the statement's last line, or after the colon of a compound
  statement's header (``def forward(...):  # cachemigrate: skip`` leaves the signature alone, not the body).
  The edits the rules plan for that statement are left out (:mod:`cachemigrate.edit.suppressed`); the file is
  still all or nothing: if a tuple use remains because of it, the file is left unchanged and the diagnostic
  names the comment.

This module reads text only (no libcst): the file-level answer comes before any parse.
"""

from __future__ import annotations

import io
import re
import tokenize

MARK = "cachemigrate:"
SKIP = re.compile(r"#\s*cachemigrate:\s*skip\b")
_HEADER_ENDS = frozenset({"class", "def", "async", "@"})


def is_skip_comment(comment: str) -> bool:
    return bool(SKIP.search(comment))


def skips_file(text: str) -> bool:
    """The file's header has ``# cachemigrate: skip`` on a line of its own."""
    if MARK not in text:
        return False
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.start[1] == 0 and token.string in _HEADER_ENDS:
                return False  # the header is over
            if (
                token.type == tokenize.COMMENT
                and token.line.lstrip().startswith("#")
                and is_skip_comment(token.string)
            ):
                return True
    except (tokenize.TokenError, SyntaxError):  # broken code: the engine reports it
        return False
    return False
