"""Side inputs: a multimodal head that needs images besides its token ids (IDEFICS) is driven with one fixed image
and an image mask the probe makes, alike on both sides; a caller that gives its own side inputs keeps them."""

from __future__ import annotations

import types

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from cachemigrate.probe.checks.common import generate  # noqa: E402
from cachemigrate.probe.models import discover, matching_classes  # noqa: E402
from cachemigrate.probe.side_inputs import image_layout, side_inputs_for, with_side_inputs  # noqa: E402
from cachemigrate.probe.tiny import tiny_config  # noqa: E402


def _images_module(name: str) -> types.ModuleType:
    """A file whose only head needs ``pixel_values`` of shape (batch, images, channels, height, width) and an
    ``image_attention_mask`` of shape (batch, text length, images), as IDEFICS's; it records what it was given."""
    from torch import nn

    class VisionConfig(transformers.PretrainedConfig):
        model_type = "cm_vision"

        def __init__(self, image_size=8, num_channels=2, **kwargs):
            self.image_size, self.num_channels = image_size, num_channels
            super().__init__(**kwargs)

    class Config(transformers.PretrainedConfig):
        model_type = "cm_images"

        def __init__(self, vocab_size=1000, hidden_size=64, vision_config=None, **kwargs):
            self.vocab_size, self.hidden_size = vocab_size, hidden_size
            self.vision_config = VisionConfig(**(vision_config or {}))
            super().__init__(**kwargs)

    class PreTrained(transformers.PreTrainedModel):
        config_class = Config

    class ForImagesAndText(PreTrained, transformers.GenerationMixin):
        def __init__(self, config):
            super().__init__(config)
            self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
            self.seen = []

        def forward(self, input_ids=None, past_key_values=None, pixel_values=None, image_attention_mask=None):
            if pixel_values is None or pixel_values.dim() != 5:
                raise ValueError("pixel_values of shape (batch, images, channels, height, width) are needed")
            if image_attention_mask.shape != (*input_ids.shape, pixel_values.shape[1]):
                raise ValueError("image_attention_mask must be (batch, text length, images)")
            self.seen.append((pixel_values, image_attention_mask))
            return self.embed(input_ids) + pixel_values.mean()

    module = types.ModuleType(name)
    for cls in (VisionConfig, Config, PreTrained, ForImagesAndText):
        cls.__module__ = name
        setattr(module, cls.__name__, cls)
    return module


def test_a_head_that_needs_images_is_driven_with_side_inputs_of_the_layout_it_runs_on_on_both_sides():
    original, migrated = _images_module("cm_images_original"), _images_module("cm_images_migrated")
    classes = discover(original)
    head = classes.head_class
    assert head.__name__ == "ForImagesAndText" and issubclass(head, original.ForImagesAndText)
    assert image_layout(head) == "batch_images"  # the (batch, channels, h, w) layout was tried first and raised
    other = matching_classes(classes, migrated).head_class
    assert issubclass(other, migrated.ForImagesAndText) and image_layout(other) == "batch_images"
    model = head(tiny_config(classes.config_class)).eval()
    out = model(input_ids=torch.tensor([[1, 2, 3], [4, 5, 6]]))
    pixels, mask = model.seen[-1]
    assert pixels.shape == (2, 1, 2, 8, 8) and torch.equal(pixels[0], pixels[1])  # one image, sized by vision_config
    assert mask.shape == (2, 3, 1) and bool(mask.all())
    again = model(torch.tensor([[1, 2, 3], [4, 5, 6]]))  # positionally too, and the same image every call
    assert torch.equal(out, again) and torch.equal(model.seen[-1][0], pixels)


def test_a_caller_that_gives_any_side_input_keeps_what_it_gave():
    module = _images_module("cm_images_given")
    head = with_side_inputs(module.ForImagesAndText, "batch_images")
    model = head(tiny_config(module.Config)).eval()
    ids = torch.tensor([[1, 2]])
    pixels = torch.zeros(1, 1, 2, 8, 8)
    model(input_ids=ids, pixel_values=pixels, image_attention_mask=torch.zeros(1, 2, 1, dtype=torch.long))
    given_pixels, given_mask = model.seen[-1]
    assert given_pixels is pixels and not given_mask.any()
    with pytest.raises(AttributeError):  # only the pixels given: the mask is not filled over the caller's choice
        model(input_ids=ids, pixel_values=pixels)


def test_generate_hands_the_prompt_side_inputs_to_an_adapted_head_only():
    module = _images_module("cm_images_generate")
    head = with_side_inputs(module.ForImagesAndText, "batch_images")
    config = tiny_config(module.Config)
    ids = torch.tensor([[1, 2, 3]])
    made = side_inputs_for(head, config, ids)
    assert set(made) == {"pixel_values", "image_attention_mask"} and made["image_attention_mask"].shape == (1, 3, 1)
    assert side_inputs_for(module.ForImagesAndText, config, ids) == {}
    calls = []

    def recording(cls):
        return type(cls.__name__, (cls,), {"generate": lambda self, ids, **kwargs: calls.append(kwargs)})

    generate(recording(head)(config), ids)
    assert torch.equal(calls[-1]["pixel_values"], made["pixel_values"])
    generate(recording(module.ForImagesAndText)(config), ids)
    assert "pixel_values" not in calls[-1]


def test_a_class_without_side_input_arguments_is_returned_as_it_is():
    class Plain(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None):
            return input_ids

    assert with_side_inputs(Plain, "batch") is Plain and image_layout(Plain) is None
