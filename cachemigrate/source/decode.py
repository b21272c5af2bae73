"""Reading a source file as the engine needs it, and writing the result back in the file's own bytes.

A file is read as bytes. Its encoding is what Python itself would use (:func:`tokenize.detect_encoding`): a UTF-8
byte order mark, else a PEP 263 coding comment on line 1 or 2, else UTF-8. The text is decoded without newline
translation, so CRLF stays CRLF. :meth:`Codec.encode` gives bytes back with the same BOM and encoding.

A file that is not text (a NUL byte), declares an unknown encoding, or does not decode, is a
:class:`~cachemigrate.diagnostics.Diagnostic` (CM904), never an exception.
"""

from __future__ import annotations

import codecs
import dataclasses
import io
import re
import tokenize

from .. import diagnostics as codes
from ..diagnostics import Diagnostic

BOM = codecs.BOM_UTF8
_NEWLINES = re.compile(r"\r\n|\r|\n")
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=]", re.MULTILINE)  # PEP 263


@dataclasses.dataclass(frozen=True)
class Codec:
    """How a file's text maps to its bytes."""

    encoding: str = "utf-8"  # a Python codec name, as declared by the file (or utf-8)
    bom: bool = False  # the file starts with a UTF-8 byte order mark (not part of the text)
    newline: str | None = "\n"  # the one newline the file uses throughout; None when it mixes them

    def encode(self, text: str) -> bytes:
        """The bytes of ``text`` in this encoding (raises UnicodeEncodeError if a character has no byte form)."""
        return (BOM if self.bom else b"") + text.encode(self.encoding)

    def keep_newlines(self, text: str) -> str:
        """``text`` with every line break in the file's own convention, when the file had one other than LF:
        in a file that is CRLF throughout, a line that came out with a bare LF gets CRLF like the others."""
        if self.newline in (None, "\n"):
            return text
        return _NEWLINES.sub(self.newline, text)


@dataclasses.dataclass(frozen=True)
class Source:
    """A file's bytes decoded as Python would read them, with what it takes to encode the text back."""

    path: str
    text: str
    codec: Codec


def newline_of(text: str) -> str | None:
    """``"\\n"``, ``"\\r\\n"`` or ``"\\r"`` when ``text`` uses only that line break (LF for a text with none);
    None when it mixes them."""
    kinds = {match.group() for match in _NEWLINES.finditer(text)}
    if not kinds:
        return "\n"
    return kinds.pop() if len(kinds) == 1 else None


def _where(data: bytes, offset: int) -> tuple[int, int]:
    """1-based line and column (in bytes) of ``offset`` in ``data``."""
    line = data.count(b"\n", 0, offset) + 1
    return line, offset - (data.rfind(b"\n", 0, offset) + 1) + 1


def _unreadable(path: str, line: int, column: int, why: str) -> Diagnostic:
    return Diagnostic(path, line, column, codes.UNREADABLE, f"{why}; the file was left unchanged")


def decode(data: bytes, path: str = "<bytes>") -> Source | Diagnostic:
    """The text of a Python file's bytes, or a CM904 diagnostic saying why it has none."""
    nul = data.find(b"\x00")
    if nul >= 0:
        return _unreadable(path, *_where(data, nul), "not a text file (it contains a NUL byte)")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        if data.startswith(BOM):
            why = "the file starts with a UTF-8 byte order mark but its coding comment declares another encoding"
            return _unreadable(path, 1, 1, why)
        if "invalid or missing encoding declaration" not in str(exc):  # an unknown encoding
            return _unreadable(path, exc.lineno or 1, 1, f"cannot read the file's encoding: {exc.msg}")
        encoding = "utf-8"  # line 1 or 2 is not UTF-8 and declares nothing: the decode below says where
    bom = encoding == "utf-8-sig"
    body = data[len(BOM) :] if bom else data
    encoding = "utf-8" if bom else encoding
    try:
        text = body.decode(encoding)
    except UnicodeDecodeError as exc:
        offset = exc.start + (len(BOM) if bom else 0)
        line, column = _where(data, offset)
        first_lines = b"\n".join(body.split(b"\n", 2)[:2])
        why = "the encoding its coding comment declares" if _COOKIE.search(first_lines) else "no coding comment"
        return _unreadable(
            path,
            line,
            column,
            f"cannot decode byte 0x{data[offset]:02x} as {encoding} ({why}): declare the file's encoding in a "
            "coding comment on line 1 or 2 (PEP 263) or save it as UTF-8",
        )
    return Source(path, text, Codec(encoding, bom, newline_of(text)))
