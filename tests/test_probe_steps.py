"""How the probe steps a model with its past: the new token alone, or the whole sequence again for a model that
skips what its past holds itself (CPM-Ant); the original model decides (``cachemigrate.probe.steps``)."""

import pytest

torch = pytest.importorskip("torch")

from cachemigrate.probe.steps import refeeds_whole_sequence  # noqa: E402


class Output(tuple):
    """(logits, past): what the probe reads from a model's output."""


class ToyLM(torch.nn.Module):
    """A causal toy whose cached key count must equal the input length plus the past; ``refeed``: it is handed
    the whole sequence and drops the positions its past holds (as CPM-Ant does); ``broken``: it takes neither."""

    def __init__(self, refeed=False, broken=False):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(20, 4)
        self.refeed, self.broken = refeed, broken

    def forward(self, input_ids, past_key_values=None, use_cache=False):
        hidden = self.embed(input_ids)
        held = 0 if past_key_values is None else past_key_values[0][0].shape[-2]
        if self.broken and past_key_values is not None:
            raise RuntimeError("no cached step")
        if self.refeed:
            hidden = hidden[:, held:]
        keys = hidden if past_key_values is None else torch.cat([past_key_values[0][0], hidden], dim=-2)
        if keys.shape[-2] != input_ids.shape[1] + (0 if self.refeed else held):
            raise RuntimeError("mask and keys disagree")
        logits = hidden @ keys.transpose(-1, -2) @ keys
        return Output((logits, ((keys, keys),) if use_cache else None))


TOKENS = torch.randint(1, 19, (2, 6), generator=torch.Generator().manual_seed(1))


def test_a_model_that_takes_the_new_token_alone_is_stepped_with_it():
    assert refeeds_whole_sequence(ToyLM(), TOKENS) is False


def test_a_model_that_skips_what_its_past_holds_is_handed_the_whole_sequence():
    assert refeeds_whole_sequence(ToyLM(refeed=True), TOKENS) is True


def test_a_model_that_can_do_neither_is_stepped_as_usual():
    assert refeeds_whole_sequence(ToyLM(broken=True), TOKENS) is False


def test_a_past_is_in_a_caches_layout_only_where_it_grew_on_axis_minus_2():
    """dynamic_cache_in_same_object expects the length the original's own past had (CPM-Ant caches its prompt
    tokens too) only for a past a Cache could hold as it is: (key, value) pairs whose axis -2 grew by a step.
    [batch, seq, heads, d] has the same shapes as [batch, heads, seq, d] where heads and tokens differ only in
    number: growth tells them apart."""
    from cachemigrate.probe.runtime import in_cache_layout

    def past(*shape):
        return ((torch.zeros(*shape), torch.zeros(*shape)),)

    assert in_cache_layout(past(2, 4, 5, 8), past(2, 4, 6, 8))  # [b, h, s, d]
    assert not in_cache_layout(past(2, 5, 4, 8), past(2, 6, 4, 8))  # [b, s, h, d]
    assert not in_cache_layout(past(5, 2, 4, 8), past(6, 2, 4, 8))  # sequence first
    assert not in_cache_layout([torch.zeros(2, 5, 16)], [torch.zeros(2, 6, 16)])  # fused keys and values
