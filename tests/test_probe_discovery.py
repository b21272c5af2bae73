"""Which classes the probe drives: generation heads of files written before 4.45 (no GenerationMixin among their
bases, their own prepare_inputs_for_generation), and the config class the head is built from (its own, or a
sub-config of it, as CLVP's decoder)."""

from __future__ import annotations

import types

import pytest

transformers = pytest.importorskip("transformers")

from cachemigrate.probe.models import _is_generation_head, discover, matching_classes  # noqa: E402
from cachemigrate.probe.tiny import tiny_config, vocab_of  # noqa: E402


class _Config(transformers.PretrainedConfig):
    model_type = "cm_toy"


class _PreTrained(transformers.PreTrainedModel):
    config_class = _Config


class _Base(_PreTrained):
    pass


class _OldHead(_PreTrained):  # a 4.35-era head: generation hooks, no GenerationMixin
    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, **kwargs):
        return {"input_ids": input_ids, "past_key_values": past_key_values}


class _OldHeadChild(_OldHead):
    pass


class _NewHead(_PreTrained, transformers.GenerationMixin):
    pass


def test_heads_of_old_files_are_generation_heads_and_base_models_are_not():
    assert _is_generation_head(_OldHead) and _is_generation_head(_OldHeadChild)
    assert _is_generation_head(_NewHead)
    assert not _is_generation_head(_Base) and not _is_generation_head(_PreTrained)


def test_sub_model_configs_name_their_vocabulary_input_vocab_size():
    class _SubConfig(transformers.PretrainedConfig):
        model_type = "cm_sub"

        def __init__(self, input_vocab_size=1000, output_vocab_size=1000, **kwargs):
            self.input_vocab_size, self.output_vocab_size = input_vocab_size, output_vocab_size
            super().__init__(**kwargs)

    config = tiny_config(_SubConfig)
    assert config.input_vocab_size == config.output_vocab_size == vocab_of(config) < 1000


def _toy_module(name: str) -> types.ModuleType:
    """A modeling module whose head declares the whole model's config but is built from its decoder sub-config."""
    from torch import nn

    class DecoderConfig(transformers.PretrainedConfig):
        model_type = "cm_decoder"

        def __init__(self, vocab_size=1000, hidden_size=64, **kwargs):
            self.vocab_size, self.hidden_size = vocab_size, hidden_size
            super().__init__(**kwargs)

    class WholeConfig(transformers.PretrainedConfig):  # no vocab_size: the head cannot be built from it
        model_type = "cm_whole"
        sub_configs = {"decoder_config": DecoderConfig}

    class PreTrained(transformers.PreTrainedModel):
        config_class = WholeConfig

    class ForCausalLM(PreTrained, transformers.GenerationMixin):
        def __init__(self, config):
            super().__init__(config)
            self.embed = nn.Embedding(config.vocab_size, config.hidden_size)

        def forward(self, input_ids=None, past_key_values=None):
            return self.embed(input_ids)

    module = types.ModuleType(name)
    for cls in (DecoderConfig, WholeConfig, PreTrained, ForCausalLM):
        cls.__module__ = name
        setattr(module, cls.__name__, cls)
    return module


def test_a_head_is_built_from_the_sub_config_that_fits_it_on_both_sides():
    original, migrated = _toy_module("cm_toy_original"), _toy_module("cm_toy_migrated")
    classes = discover(original)
    assert classes.head_class is original.ForCausalLM and classes.config_class is original.DecoderConfig
    assert classes.base_class is original.ForCausalLM  # no base_model_prefix attribute: the head is its own base
    other = matching_classes(classes, migrated)
    assert other.head_class is migrated.ForCausalLM and other.config_class is migrated.DecoderConfig


def test_a_head_that_no_config_builds_reports_the_error_of_its_declared_config():
    module = _toy_module("cm_toy_broken")
    del module.DecoderConfig.__init__  # the decoder config loses its vocab_size too
    with pytest.raises(AttributeError, match="WholeConfig"):
        discover(module)


def _multimodal_module(name: str) -> types.ModuleType:
    """A file with a picture-and-text head (fewer forward parameters, but it needs ``pixel_values``) and a text
    decoder head built from its own text config class."""
    from torch import nn

    class TextConfig(transformers.PretrainedConfig):
        model_type = "cm_text"

        def __init__(self, vocab_size=1000, hidden_size=64, **kwargs):
            self.vocab_size, self.hidden_size = vocab_size, hidden_size
            super().__init__(**kwargs)

    class WholeConfig(transformers.PretrainedConfig):
        model_type = "cm_picture"
        sub_configs = {"text_config": TextConfig}

        def __init__(self, text_config=None, **kwargs):
            self.text_config = TextConfig(**(text_config or {}))
            super().__init__(**kwargs)

    class PreTrained(transformers.PreTrainedModel):
        config_class = WholeConfig

    class TextForCausalLM(PreTrained, transformers.GenerationMixin):
        config_class = TextConfig

        def __init__(self, config):
            super().__init__(config)
            self.embed = nn.Embedding(config.vocab_size, config.hidden_size)

        def forward(
            self, input_ids=None, attention_mask=None, image_embeds=None, past_key_values=None, use_cache=None
        ):
            return self.embed(input_ids)

    class ForPictureToText(PreTrained, transformers.GenerationMixin):
        def __init__(self, config):
            super().__init__(config)
            self.text_model = TextForCausalLM(config.text_config)

        def forward(self, pixel_values=None, input_ids=None, past_key_values=None, use_cache=None):
            if pixel_values is None:
                raise ValueError("You have to specify `pixel_values`")
            return self.text_model(input_ids)

    module = types.ModuleType(name)
    for cls in (TextConfig, WholeConfig, PreTrained, TextForCausalLM, ForPictureToText):
        cls.__module__ = name
        setattr(module, cls.__name__, cls)
    return module


def test_a_head_that_needs_more_than_tokens_gives_way_to_the_text_decoder_of_the_file():
    module = _multimodal_module("cm_toy_picture")
    classes = discover(module)
    assert classes.head_class is module.TextForCausalLM and classes.config_class is module.TextConfig


def test_when_no_head_runs_on_tokens_alone_or_with_side_inputs_the_one_with_fewest_parameters_is_reported():
    module = _multimodal_module("cm_toy_picture_only")
    del module.TextForCausalLM
    picture_forward = module.ForPictureToText.forward

    def forward(self, pixel_values=None, input_ids=None, past_key_values=None, use_cache=None, image_embeds=None):
        if image_embeds is None:  # a side input the probe cannot make
            raise ValueError("You have to specify `image_embeds`")
        return picture_forward(self, pixel_values, input_ids, past_key_values, use_cache)

    module.ForPictureToText.forward = forward
    classes = discover(module)
    assert classes.head_class is module.ForPictureToText


def _token_module(name: str) -> types.ModuleType:
    """A base model (no head) whose forward calls its token ids ``trajectories``."""
    from torch import nn

    class Config(transformers.PretrainedConfig):
        model_type = "cm_tokens"

        def __init__(self, vocab_size=1000, hidden_size=64, num_layers=3, **kwargs):
            self.vocab_size, self.hidden_size, self.num_layers = vocab_size, hidden_size, num_layers
            super().__init__(**kwargs)

    class PreTrained(transformers.PreTrainedModel):
        config_class = Config

    class Model(PreTrained):
        def __init__(self, config):
            super().__init__(config)
            self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
            self.blocks = nn.ModuleList(nn.Linear(config.hidden_size, config.hidden_size) for _ in range(2))

        def forward(self, trajectories=None, past_key_values=None, use_cache=None):
            hidden = self.embed(trajectories)
            for block in self.blocks:
                hidden = block(hidden)
            return hidden

    module = types.ModuleType(name)
    for cls in (Config, PreTrained, Model):
        cls.__module__ = name
        setattr(module, cls.__name__, cls)
    return module


def test_a_forward_that_names_its_token_ids_otherwise_is_driven_through_input_ids_on_both_sides():
    import inspect

    import torch

    original, migrated = _token_module("cm_toy_tokens_original"), _token_module("cm_toy_tokens_migrated")
    classes = discover(original)
    assert classes.base_class.__name__ == "Model" and issubclass(classes.base_class, original.Model)
    assert list(inspect.signature(classes.base_class.forward).parameters)[1] == "input_ids"
    other = matching_classes(classes, migrated)
    assert issubclass(other.base_class, migrated.Model) and other.base_class is not migrated.Model
    model = classes.base_class(tiny_config(classes.config_class)).eval()
    tokens = torch.tensor([[1, 2, 3]])
    plain = original.Model.forward(model, trajectories=tokens)
    assert torch.equal(model(input_ids=tokens), plain) and torch.equal(model(tokens), plain)
    assert set(model.state_dict()) == set(original.Model(model.config).state_dict())
