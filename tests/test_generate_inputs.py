"""CM914 (cachemigrate/proof/generate_inputs.py): a migrated file for a 5.x runtime whose forward updates in place an
input that 5.x's generate() keeps between steps (``position_ids += offset``) gets a note naming the statement and
its out-of-place spelling; 4.x eras, rebound inputs and other names get none."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from cachemigrate.cli.main import main
from cachemigrate.proof.generate_inputs import in_place_input_notes

EMBEDDING = '''
class Positions(nn.Module):
    def forward(self, position_ids, past_key_values_length=0):
        position_ids {update}
        return self.weights.index_select(0, position_ids.view(-1))
'''


@pytest.mark.parametrize(
    "update, fix",
    [
        ("+= self.offset", "`position_ids = position_ids + self.offset`"),
        (".add_(2)", "`position_ids = position_ids.add(2)` (out of place)"),
    ],
)
def test_an_in_place_update_of_a_kept_input_is_noted_with_its_fix(update, fix):
    code = EMBEDDING.format(update=update)
    [note] = in_place_input_notes("m.py", code, ">=5.0")
    assert (note.code, note.line) == ("CM914", 4)
    assert "on transformers 5.0 and later, generate() keeps the `position_ids`" in note.message
    assert note.message.endswith(f"write {fix}")


@pytest.mark.parametrize(
    "code",
    [
        EMBEDDING.format(update="= position_ids + self.offset"),  # out of place already
        EMBEDDING.replace("position_ids {update}", "position_ids = position_ids.clone()\n        position_ids += 2"),
        EMBEDDING.replace("position_ids", "positions").format(update="+= 2"),  # not an input generate() keeps
    ],
)
def test_out_of_place_rebound_or_other_names_get_no_note(code):
    assert in_place_input_notes("m.py", code, ">=5.0") == []


def test_the_command_line_notes_what_no_rule_rewrites_for_era_5_only(tmp_path):
    """``position_ids += x`` is rewritten out of place by CM423 in era 5 (no note left); ``position_ids.add_(x)``,
    which no rule rewrites, gets the note there; era 4.56 (a 4.x runtime) neither."""
    from pathlib import Path

    legacy = (Path(__file__).resolve().parent.parent / "fixtures" / "4.52" / "full" / "before.py").read_text()
    outputs = {}
    for era in ("4.56", "5"):
        for kind, update in enumerate(("+= self.offset", ".add_(2)")):
            path = tmp_path / era / str(kind) / "modeling_toy.py"
            path.parent.mkdir(parents=True)
            path.write_text(legacy + EMBEDDING.format(update=update))
            result = CliRunner().invoke(main, ["migrate", "--era", era, "--no-cache", str(path)])
            assert result.exit_code == 0, result.output
            assert "migrated" in result.output
            notes = [line for line in result.output.splitlines() if "CM914" in line]
            outputs[era, update] = (notes, path.read_text())
    assert all(notes == [] for (era, _), (notes, _) in outputs.items() if era == "4.56")
    assert "position_ids += self.offset" in outputs["4.56", "+= self.offset"][1]
    notes, text = outputs["5", "+= self.offset"]
    assert notes == [] and "position_ids = position_ids + self.offset" in text  # CM423
    notes, text = outputs["5", ".add_(2)"]
    assert len(notes) == 1 and "position_ids.add_(2)" in notes[0] and ".add_(2)" in text
