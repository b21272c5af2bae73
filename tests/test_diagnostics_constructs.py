"""Constructs no rule migrates, each said once, at its own line, with why: the past concatenated between other
tensors (GIT's image prefix), a past the model builds itself as tuples (GPTSAN's ``spout``), a loop over the past
layer by layer. The file is left byte-identical, and no "required rule found nothing" note repeats the cause."""

from __future__ import annotations

import textwrap

from cachemigrate.engine import Options, migrate_source

ATTENTION = """
import torch
from torch import nn


class WrenAttention(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.k = nn.Linear(width, width)
        self.v = nn.Linear(width, width)

    def forward(self, hidden_states, past_key_value=None, prefix=0):
        key = self.k(hidden_states).unsqueeze(1)
        value = self.v(hidden_states).unsqueeze(1)
        if past_key_value is not None:
            key = CAT_KEY
            value = CAT_VALUE
        present = (key[:, :, prefix:, :], value[:, :, prefix:, :])
        return torch.softmax(key @ key.transpose(-1, -2), dim=-1) @ value, present
"""

MODEL = """

class WrenBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.attn = WrenAttention(width)

    def forward(self, hidden_states, past_key_value=None):
        return self.attn(hidden_states, past_key_value=past_key_value)


class WrenModel(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.prefix = nn.Linear(width, depth * 2 * width)
        self.blocks = nn.ModuleList([])
        for _ in range(depth):
            self.blocks.append(WrenBlock(width))

    def forward(self, hidden_states, past_key_values=None, use_cache=None, prefix=None):
        presents = () if use_cache else None
        if past_key_values is not None:
            pasts = past_key_values
        elif prefix is not None:
            pasts = self.prefix(prefix).split(2, dim=0)
            pasts = tuple(tuple(part.split(1, dim=0)) for part in pasts)
        else:
            pasts = [None] * len(self.blocks)
        for i, past in enumerate(pasts):
            hidden_states, present = self.blocks[i](hidden_states, past)
            if use_cache:
                presents = presents + (present,)
        return hidden_states, presents
"""

STANDARD_CAT = ("torch.cat([past_key_value[0], key], dim=-2)", "torch.cat([past_key_value[1], value], dim=-2)")
MIDDLE_CAT = (
    "torch.cat([key[:, :, :prefix, :], past_key_value[0], key[:, :, -1:, :]], dim=-2)",
    "torch.cat([value[:, :, :prefix, :], past_key_value[1], value[:, :, -1:, :]], dim=-2)",
)


def _code(cats) -> str:
    code = ATTENTION.replace("CAT_KEY", cats[0]).replace("CAT_VALUE", cats[1]) + MODEL
    return textwrap.dedent(code).lstrip()


def _line(code: str, text: str) -> int:
    [line] = [n for n, line in enumerate(code.splitlines(), 1) if text in line]
    return line


def _migrate(code, ruleset):
    return migrate_source(code, ruleset, Options(line_length=119), path="modeling_wren.py")


def test_a_past_between_other_tensors_is_one_diagnostic_at_the_concatenation(ruleset_452):
    code = _code(MIDDLE_CAT).replace(
        "        for i, past in enumerate(pasts):",
        "        for i in range(len(self.blocks)):\n            past = pasts",
    )
    code = code.replace("            pasts = tuple(tuple(part.split(1, dim=0)) for part in pasts)\n", "")
    result = _migrate(code, ruleset_452)
    assert result.status == "failed" and result.migrated == code
    on_attention = [d for d in result.diagnostics if d.line < _line(code, "class WrenBlock")]
    assert len(on_attention) == 1, [str(d) for d in result.diagnostics]
    [diagnostic] = on_attention
    assert diagnostic.code == "CM900" and diagnostic.line == _line(code, "key = torch.cat([key[:, :, :prefix")
    assert "concatenates the past between other tensors" in diagnostic.message
    assert "`update()`" in diagnostic.message


def test_a_past_built_by_the_model_and_a_loop_over_the_past_are_one_diagnostic_each(ruleset_452):
    code = _code(STANDARD_CAT)
    result = _migrate(code, ruleset_452)
    assert result.status == "failed" and result.migrated == code
    lines = {d.line: d for d in result.diagnostics}
    assert sorted(lines) == [_line(code, "pasts = tuple(tuple("), _line(code, "for i, past in enumerate(pasts)")]
    built = lines[_line(code, "pasts = tuple(tuple(")].message
    assert "builds itself as tuples (`pasts = self.prefix(prefix).split(2, dim=0)`" in built
    loop = lines[_line(code, "for i, past in enumerate(pasts)")].message
    assert "iterates `pasts` layer by layer" in loop and "hand each the whole cache" in loop
    assert all(d.code == "CM900" for d in result.diagnostics)


def test_the_standard_concatenation_is_not_taken_for_one_between_other_tensors():
    import libcst as cst

    from cachemigrate.facts.constructs import between_others

    for cats, expected in ((STANDARD_CAT, 0), (MIDDLE_CAT, 4)):  # the subscript and its name, in each statement
        module = cst.parse_module(_code(cats))
        forward = module.body[2].body.body[1]
        assert len(between_others(forward, {"past_key_value"})) == expected
