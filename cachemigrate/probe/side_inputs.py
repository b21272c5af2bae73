"""Side inputs: tensors a multimodal causal head requires besides its token ids, made alike for both files of a probe.

IDEFICS's ``IdeficsForVisionText2Text.forward`` raises without ``pixel_values`` (or image embeddings), and without an
``image_attention_mask`` of shape (batch, text length, images); the file has no text-only head to drive instead. When
no causal head of a file runs on ``input_ids`` alone, :func:`with_side_inputs` gives the probe a subclass of the same
name whose forward fills these arguments from :data:`MAKERS` when the caller gave none of them: one fixed random
image for every row, and a mask that lets every text position of the call see it. A caller that gives any of them
gives the set it means (``generate()`` gets them for the prompt, and IDEFICS's own hooks then hand later steps the
image states instead of the pixels, with the mask's last row), so nothing is filled over it. Every check then calls
the model as before (prompt, cached steps, ``generate()``, ``jit.trace``); the weights and the code that runs are the
class's own. Both sides get the same adapter with the same image layout, the first of :data:`IMAGE_LAYOUTS` under
which the ORIGINAL runs (see :func:`.models.discover`).
"""

from __future__ import annotations

import inspect
from typing import Callable

IMAGE_SEED = 1234
# (batch, channels, height, width), or (batch, images, channels, height, width) with one image per row (IDEFICS)
IMAGE_LAYOUTS = ("batch", "batch_images")
MARK = "_cachemigrate_side_inputs"  # the class attribute holding the image layout of an adapted class


def _vision_config(config):
    return getattr(config, "vision_config", None) or config


def _image(config, batch: int, length: int, layout: str):
    """One random image, the same for every row and every call, sized by the (vision) config."""
    import torch

    vision = _vision_config(config)
    size = getattr(vision, "image_size", 224)
    height, width = (size, size) if isinstance(size, int) else tuple(size)[:2]
    channels = getattr(vision, "num_channels", 3)
    one = torch.randn(1, channels, height, width, generator=torch.Generator().manual_seed(IMAGE_SEED))
    images = one.expand(batch, -1, -1, -1)
    return (images.unsqueeze(1) if layout == "batch_images" else images).contiguous()


def _image_mask(config, batch: int, length: int, layout: str):
    """Every text position of the call attends to the one image: ones of shape (batch, length, 1)."""
    import torch

    return torch.ones(batch, length, 1, dtype=torch.long)


# argument name -> maker(config, batch, text length of the call, image layout)
MAKERS: dict[str, Callable] = {"pixel_values": _image, "image_attention_mask": _image_mask}


def side_input_names(cls) -> list[str]:
    """The arguments of ``cls.forward`` that :data:`MAKERS` can fill."""
    parameters = inspect.signature(cls.forward).parameters
    return [name for name in MAKERS if name in parameters]


def image_layout(cls) -> str | None:
    """The image layout of a class :func:`with_side_inputs` made, or None for any other class."""
    return getattr(cls, MARK, None)


def with_side_inputs(cls, layout: str) -> type:
    """``cls``, or when its forward takes arguments of :data:`MAKERS`, a subclass of the same name whose forward fills
    them when the caller gave none, sized by the call's ``input_ids`` (or ``inputs_embeds``) and ``self.config``."""
    names = side_input_names(cls)
    if not names:
        return cls
    run = cls.forward
    signature = inspect.signature(run)

    def forward(self, *args, **kwargs):
        bound = signature.bind_partial(self, *args, **kwargs)
        tokens = bound.arguments.get("input_ids")
        tokens = tokens if tokens is not None else bound.arguments.get("inputs_embeds")
        if tokens is not None and all(bound.arguments.get(name) is None for name in names):
            batch, length = tokens.shape[:2]
            for name in names:
                bound.arguments[name] = MAKERS[name](self.config, batch, length, layout)
        return run(*bound.args, **bound.kwargs)

    forward.__signature__ = signature
    namespace = {"forward": forward, "__module__": cls.__module__, "__qualname__": cls.__qualname__, MARK: layout}
    return type(cls.__name__, (cls,), namespace)


def side_inputs_for(cls, config, tokens) -> dict:
    """{name: tensor} of the side inputs of an adapted class for a call on ``tokens``; {} for any other class."""
    layout = image_layout(cls)
    if layout is None:
        return {}
    batch, length = tokens.shape[:2]
    return {name: MAKERS[name](config, batch, length, layout) for name in side_input_names(cls)}
