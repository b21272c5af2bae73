"""Decoding and encoding source files (cachemigrate.source.decode) and the bytes-in, bytes-out pipeline
(cachemigrate.cli.runner.migrate_bytes): what must survive a migration byte for byte."""

from pathlib import Path

import pytest

from cachemigrate.diagnostics import Diagnostic
from cachemigrate.engine import Options
from cachemigrate.cli.runner import migrate_bytes
from cachemigrate.source.decode import BOM, Codec, decode, newline_of

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BEFORE = (FIXTURES / "4.52" / "full" / "before.py").read_bytes()
AFTER = (FIXTURES / "4.52" / "full" / "after.py").read_bytes()
OPTIONS = Options(line_length=119)  # the fixtures were written for 119 columns


@pytest.mark.parametrize(
    "data, encoding, bom, newline",
    [
        (b"x = 1\ny = 2\n", "utf-8", False, "\n"),
        (b"x = 1\r\ny = 2\r\n", "utf-8", False, "\r\n"),
        (b"x = 1\ry = 2\r", "utf-8", False, "\r"),
        (b"x = 1\r\ny = 2\n", "utf-8", False, None),
        (b"x = 1", "utf-8", False, "\n"),
        (BOM + b"x = 1\n", "utf-8", True, "\n"),
        (b"# -*- coding: latin-1 -*-\nname = 'caf\xe9'\n", "iso-8859-1", False, "\n"),
        (b"#!/usr/bin/env python\n# vim: set fileencoding=cp1252 :\nname = '\x80'\n", "cp1252", False, "\n"),
    ],
)
def test_decode_finds_encoding_bom_and_newline_and_encode_gives_the_bytes_back(data, encoding, bom, newline):
    source = decode(data, "m.py")
    assert source.codec == Codec(encoding, bom, newline)
    assert not source.text.startswith("\ufeff")  # the BOM is not part of the text the engine sees
    assert ("\r" in source.text) == (b"\r" in data)  # no newline translation
    assert source.codec.encode(source.text) == data


def test_latin1_text_is_decoded_as_declared():
    source = decode(b"# coding: latin-1\nname = 'caf\xe9'\n", "m.py")
    assert "café" in source.text


@pytest.mark.parametrize(
    "data, line, column, message",
    [
        (b"x = 1\n\x00\x01\x02", 2, 1, "not a text file (it contains a NUL byte)"),
        (b"x = 1\nname = 'caf\xe9'\n", 2, 12, "cannot decode byte 0xe9 as utf-8 (no coding comment)"),
        (b"# caf\xe9\nx = 1\n", 1, 6, "cannot decode byte 0xe9 as utf-8 (no coding comment)"),
        (b"# coding: utf-8\nx = '\xff'\n", 2, 6, "cannot decode byte 0xff as utf-8 (the encoding its coding comment"),
        (b"# -*- coding: klingon -*-\nx = 1\n", 1, 1, "cannot read the file's encoding: unknown encoding: klingon"),
        (BOM + b"# coding: latin-1\nx = 1\n", 1, 1, "the file starts with a UTF-8 byte order mark but its coding"),
    ],
)
def test_binary_and_undecodable_files_are_a_cm904_diagnostic(data, line, column, message):
    diagnostic = decode(data, "m.py")
    assert isinstance(diagnostic, Diagnostic)
    assert (diagnostic.path, diagnostic.line, diagnostic.column, diagnostic.code) == ("m.py", line, column, "CM904")
    assert diagnostic.message.startswith(message)
    assert diagnostic.message.endswith("the file was left unchanged")


def test_newline_of():
    assert newline_of("a\r\nb\r\n") == "\r\n"
    assert newline_of("a\nb") == "\n"
    assert newline_of("a\r\nb\n") is None
    assert newline_of("") == "\n"


def test_keep_newlines_gives_bare_lf_lines_the_files_crlf_and_leaves_lf_and_mixed_files_alone():
    assert Codec(newline="\r\n").keep_newlines("a\r\nnew\nb\r\n") == "a\r\nnew\r\nb\r\n"
    assert Codec(newline="\n").keep_newlines("a\r\nb\n") == "a\r\nb\n"
    assert Codec(newline=None).keep_newlines("a\r\nb\n") == "a\r\nb\n"


# ------------------------------------------------------------------------------------------------------------------
# migrate_bytes: the full fixture in other encodings and line endings
# ------------------------------------------------------------------------------------------------------------------


def test_crlf_file_migrates_to_the_crlf_version_of_after(ruleset_452):
    result = migrate_bytes(BEFORE.replace(b"\n", b"\r\n"), ruleset_452, OPTIONS, "m.py")
    assert result.status == "migrated", result.diagnostics
    assert result.encoded() == AFTER.replace(b"\n", b"\r\n")  # inserted lines included


def test_bom_file_keeps_its_bom(ruleset_452):
    result = migrate_bytes(BOM + BEFORE, ruleset_452, OPTIONS, "m.py")
    assert result.status == "migrated", result.diagnostics
    assert result.encoded() == BOM + AFTER


def test_latin1_file_is_migrated_and_written_in_latin1(ruleset_452):
    header = b"# -*- coding: latin-1 -*-\n# Auteur: Ren\xe9 Caf\xe9\n"
    result = migrate_bytes(header + BEFORE, ruleset_452, OPTIONS, "m.py")
    assert result.status == "migrated", result.diagnostics
    assert result.encoded() == header + AFTER


def test_a_migrated_file_that_cannot_be_encoded_back_is_left_unchanged(ruleset_452, tmp_path):
    # a rule that inserts a character latin-1 has no byte for: the migration is refused, not written half-right
    rules = tmp_path / "4.52"
    rules.mkdir()
    cm030 = (FIXTURES.parent / "rules" / "4.52" / "CM030.toml").read_text(encoding="utf-8")
    assert "_supports_cache_class" in cm030
    (rules / "CM030.toml").write_text(cm030.replace('value = "True"', "value = 'bool(\"✓\")'"), encoding="utf-8")
    from cachemigrate.rules.loader import load_ruleset

    ruleset = load_ruleset("4.52", (tmp_path,))
    data = b"# -*- coding: latin-1 -*-\n" + BEFORE
    utf8 = migrate_bytes(BEFORE, ruleset, OPTIONS, "m.py")
    assert utf8.status == "migrated" and 'bool("✓")' in utf8.migrated  # the rule does insert the character
    result = migrate_bytes(data, ruleset, OPTIONS, "m.py")
    assert result.status == "failed" and not result.changed
    [diagnostic] = result.diagnostics
    assert diagnostic.code == "CM906" and "iso-8859-1 cannot encode" in diagnostic.message


def test_binary_input_is_a_failed_result_not_an_exception(ruleset_452):
    result = migrate_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)), ruleset_452, OPTIONS, "lib.so")
    assert result.status == "failed" and not result.changed and result.codec is None
    assert [d.code for d in result.diagnostics] == ["CM904"]
