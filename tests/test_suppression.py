"""``# cachemigrate: skip``: a file in its header, a statement at its end (cachemigrate.source.suppression, and the
engine's hook cachemigrate.edit.suppressed)."""

from pathlib import Path

import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.source.suppression import skips_file

BEFORE = (Path(__file__).resolve().parent.parent / "fixtures" / "4.52" / "full" / "before.py").read_text()
OPTIONS = Options(line_length=119)
CAT_K = "k = torch.cat((past_k, k), dim=-2)"


def migrate(code: str):
    from cachemigrate.rules.loader import load_ruleset

    return migrate_source(code, load_ruleset("4.52"), OPTIONS, path="modeling_pebble.py")


@pytest.mark.parametrize(
    "text, skipped",
    [
        ("# cachemigrate: skip\nimport torch\n", True),
        ('"""Doc."""\n\nimport torch\n#cachemigrate:skip\n\nclass A:\n    pass\n', True),
        ("# Copyright\n# cachemigrate: skip -- vendored, migrated upstream\nclass A:\n    pass\n", True),
        ("import torch\n\nclass A:\n    pass\n# cachemigrate: skip\n", False),  # after the header
        ("import torch\n\n@decorate\n# cachemigrate: skip\ndef f():\n    pass\n", False),
        ("x = 1  # cachemigrate: skip\n", False),  # a statement's mark, not the file's
        ('"""\n# cachemigrate: skip\n"""\n', False),  # inside a docstring
        ("# cachemigrate: skipped\n", False),
        ("# cachemigrate: check\n", False),
    ],
)
def test_the_file_mark_is_a_comment_line_of_the_header(text, skipped):
    assert skips_file(text) is skipped


def test_a_file_marked_in_its_header_is_skipped_and_unchanged():
    code = BEFORE.replace("import torch\n", "import torch\n\n# cachemigrate: skip\n", 1)
    result = migrate(code)
    assert (result.status, result.migrated, result.diagnostics) == ("skipped", code, [])


def test_a_marked_statement_keeps_the_file_unchanged_with_a_diagnostic_naming_the_comment():
    assert migrate(BEFORE).status == "migrated"
    code = BEFORE.replace(CAT_K, CAT_K + "  # cachemigrate: skip")
    result = migrate(code)
    assert result.status == "failed" and result.migrated == code
    line = code.splitlines().index("            " + CAT_K + "  # cachemigrate: skip") + 1
    [note] = [d for d in result.diagnostics if d.code == "CM907"]
    assert note.line == line and "`# cachemigrate: skip`" in note.message and "CM002" in note.message
    assert any(d.code == "CM900" for d in result.diagnostics)  # the usual diagnostic for what remains


def test_a_marked_statement_without_edits_changes_nothing():
    marked = "q, k, v = self.qkv(hidden_states).chunk(3, dim=-1)"
    assert marked in BEFORE
    code = BEFORE.replace(marked, marked + "  # cachemigrate: skip", 1)
    plain, suppressed = migrate(BEFORE), migrate(code)
    assert suppressed.status == "migrated"
    assert suppressed.migrated == plain.migrated.replace(marked, marked + "  # cachemigrate: skip", 1)


def test_a_marked_header_leaves_only_the_header_alone():
    """The mark after the colon of the attention's ``def forward(...):`` covers the signature, not the body."""
    header = "    def forward(self, hidden_states, layer_past=None, attention_mask=None, use_cache=False):\n"
    assert BEFORE.count(header) == 2
    code = BEFORE.replace(header, header[:-1] + "  # cachemigrate: skip\n", 1)
    result = migrate(code)  # the dynamic tier has no edit of the signature: the body is migrated
    assert result.status == "migrated"
    assert "layer_past.update(k, v, self.layer_idx)" in result.migrated
    assert header[:-1] + "  # cachemigrate: skip\n" in result.migrated
    # the static tier adds `cache_position` to that signature: left out, and the body cannot do without it
    from cachemigrate.rules.loader import load_ruleset

    static = migrate_source(code, load_ruleset("4.52"), Options(tier="static", line_length=119), path="m.py")
    assert static.status == "failed" and static.migrated == code
    notes = [d for d in static.diagnostics if d.code == "CM907"]
    assert [d.line for d in notes] == [code.splitlines().index(header[:-1] + "  # cachemigrate: skip") + 1]
    assert not [d for d in static.diagnostics if d.code == "CM999"]  # not an internal error: the mark did it


def test_the_statement_mark_must_be_at_the_end_of_the_statement():
    """A mark on a line of its own inside the code marks nothing: the file migrates as usual."""
    code = BEFORE.replace("            " + CAT_K, "            # cachemigrate: skip\n            " + CAT_K)
    assert migrate(code).status == "migrated"
