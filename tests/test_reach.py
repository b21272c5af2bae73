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
        # XLNet's deprecated flag: **kwargs looked up only by a key that is not a cache name
        ("**kwargs", ", kwargs['use_cache'] if 'use_cache' in kwargs else kwargs.get('use_mems')"),
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
        ("**kwargs", ", kwargs['past']"),
        ("key='use_cache', **kwargs", ", kwargs[key]"),  # a key that is not written out: could be a cache name
        ("**kwargs", ", kwargs.get('use_cache'), kwargs"),  # handed on as a whole
    ],
)
def test_a_forward_that_can_take_a_cache_makes_the_cache_code_reachable(params, call):
    result = migrate(params, call)
    assert "CM299" not in codes(result)
    assert result.status != "clean"


HEAD = """\
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
        if "use_cache" in kwargs:
            kwargs.pop("use_cache")
        return self.attn(self.embed(input_ids)#CALL#)


class ToyHead(PreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.model = ToyModel(config)

    def forward(self, input_ids, **kwargs):
        return self.model(input_ids, **kwargs)
"""


@pytest.mark.parametrize(
    "params, call, reachable",
    [
        ("**kwargs", "", False),  # XLNet: the head hands **kwargs to a model that only drops a flag from them
        ("past_key_values=None, **kwargs", ", past_key_values", True),
        ("**kwargs", ", **kwargs", True),  # the model hands them on in turn
    ],
)
def test_kwargs_handed_to_a_model_class_of_the_file_reach_what_its_forward_takes(params, call, reachable):
    source = HEAD.replace("#PARAMS#", params).replace("#CALL#", call)
    result = migrate_source(source, load_ruleset("4.52"), Options(tier="dynamic"), path="toy.py")
    assert ("CM299" in codes(result)) is not reachable
    assert (result.status == "clean") is not reachable
