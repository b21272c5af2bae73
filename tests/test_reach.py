"""Cache code no model class can reach (CM299): an encoder-only copy of a decoder attention is left unchanged, with
exit 0, and only when no forward of a PreTrainedModel class of the file can take a cache."""

import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset

TOY = """\
import torch
from torch import nn
from transformers import PreTrainedModel


class ToySelfAttention(nn.Module):
    def forward(self, hidden_states, past_key_value=None):
        key = self.key(hidden_states)
        if past_key_value is not None:
            key = torch.cat([past_key_value[0], key], dim=2)
        return key, (key,)


class ToyModel(PreTrainedModel):
    def forward(self, input_ids, #PARAMS#):
        return self.attn(self.embed(input_ids)#CALL#)
"""


def migrate(params: str, call: str = ""):
    source = TOY.replace("#PARAMS#", params).replace("#CALL#", call)
    return migrate_source(source, load_ruleset("4.52"), Options(tier="dynamic"), path="toy.py")


def codes(result) -> list[str]:
    return [d.code for d in result.diagnostics]


@pytest.mark.parametrize(
    "params, call",
    [
        ("output_attentions=False", ""),
        ("output_attentions=False, **kwargs", ""),  # TAPAS's masked-LM head: **kwargs it never reads
    ],
)
def test_cache_code_no_model_class_can_reach_is_left_unchanged(params, call):
    result = migrate(params, call)
    assert result.status == "clean" and codes(result) == ["CM299"]
    (diagnostic,) = result.diagnostics
    assert diagnostic.line == 10  # the first tuple use, in the attention
    assert "no model class of the file (ToyModel) takes a cache" in diagnostic.message


@pytest.mark.parametrize(
    "params, call",
    [
        ("past_key_values=None", ""),
        ("**kwargs", ", **kwargs"),  # handed on: a cache can come in that way
        ("**kwargs", ", kwargs.get('past_key_values')"),
    ],
)
def test_a_forward_that_can_take_a_cache_makes_the_cache_code_reachable(params, call):
    result = migrate(params, call)
    assert "CM299" not in codes(result)
    assert result.status != "clean"
