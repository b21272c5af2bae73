"""The width of inserted code when nothing configures it: the file's own, read off its code lines."""

from pathlib import Path

import pytest

from cachemigrate.edit.width import infer_width, width_note
from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset

FULL = Path(__file__).resolve().parent.parent / "fixtures" / "4.52" / "full" / "before.py"


def code_with_longest(length: int) -> str:
    filler = "x" * (length - len("value = ") - len("[]"))
    return f"value = [{filler}]\nother = 1\n"


@pytest.mark.parametrize(
    "longest, width", [(79, 79), (84, 88), (88, 88), (95, 99), (100, 100), (112, 119), (120, 120)]
)
def test_the_longest_code_line_snaps_up_to_a_common_width(longest, width):
    assert infer_width(code_with_longest(longest)).columns == width


def test_a_file_of_short_lines_gets_blacks_default():
    assert infer_width("a = 1\nb = a + 2\n").columns == 88


def test_strings_and_comments_do_not_count_black_never_splits_them():
    code = code_with_longest(80) + f"x = {'a' * 140!r}\n" + "# " + "c" * 130 + "\ny = 1  # " + "d" * 120 + "\n"
    assert infer_width(code).columns == 88
    docstring = 'def f():\n    """' + "w " * 80 + '\n    more\n    """\n'
    assert infer_width(code_with_longest(98) + docstring).columns == 99


def test_wider_than_every_common_width_is_the_widest():
    assert infer_width(code_with_longest(150)).columns == 120


def test_verbose_says_which_width_and_why():
    code = code_with_longest(112)
    assert width_note(None, code).startswith("width 119, the file's own (its longest code line")
    assert "112 characters" in width_note(None, code)
    assert width_note(100, code) == "width 100, from --line-length or the config"


def test_the_engine_uses_the_files_own_width_when_none_is_given():
    code = FULL.read_text()
    ruleset = load_ruleset("4.52")
    own = infer_width(code).columns
    inferred = migrate_source(code, ruleset, Options(), path="before.py")
    explicit = migrate_source(code, ruleset, Options(line_length=own), path="before.py")
    narrow = migrate_source(code, ruleset, Options(line_length=60), path="before.py")
    assert inferred.status == "migrated" and inferred.migrated == explicit.migrated
    assert narrow.migrated != inferred.migrated  # the width is used at all
