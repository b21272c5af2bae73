"""cachemigrate/actions/tie_override.py: an override of `tie_weights` that cannot reach the output embeddings leaves
them untied at its class's level (4.x replaced its own tie with the override), so CM420 gives that class no mapping
of them; one that might reach them stays unproven and the file is refused (fixtures/5/CM420/override_untied_*.py,
override_reaching_refused.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.actions.tie_override import override_leaves_untied
from cachemigrate.actions.tie_sources import TieSources, resolve

CM420 = Path(__file__).resolve().parent.parent / "fixtures" / "5" / "CM420"
BEFORE = (CM420 / "override_untied_before.py").read_text()
OVERRIDE = """    def tie_weights(self):
        if getattr(self.config, "tie_encoder_decoder", False):
            prefix = self.decoder.base_model_prefix
            self._tie_encoder_decoder_weights(self.text_encoder, self.decoder._modules[prefix], prefix)
"""


def _sources(override: str = OVERRIDE) -> TieSources:
    assert OVERRIDE in BEFORE
    return TieSources(cst.parse_module(BEFORE.replace(OVERRIDE, textwrap.indent(textwrap.dedent(override), "    "))))


def test_an_override_tying_only_the_text_encoder_leaves_the_output_embeddings_untied():
    sources = _sources()
    assert sources.output_embeddings("LarkForSpeech") == "decoder.head"
    assert override_leaves_untied(sources, "LarkForSpeech", "decoder.head")
    ties = sources.ties("LarkForSpeech")
    assert next(t.how for t in ties if t.target == "decoder.head.weight") == "untied"
    # an entry naming the head is what the decoder tied itself, as it was built
    assert resolve(ties, "decoder.head.weight") == ([("decoder.head.weight", "decoder.body.tokens.weight")], None)


@pytest.mark.parametrize(
    "override",
    [
        # 4.x's own tie of the output embeddings, through the base's method
        """
        def tie_weights(self):
            super().tie_weights()
        """,
        # the first argument of `_tie_encoder_decoder_weights` is what it sets: here the decoder, head included
        """
        def tie_weights(self):
            self._tie_encoder_decoder_weights(self.decoder, self.text_encoder, "body")
        """,
        # the getter hands the head to code that is not read
        """
        def tie_weights(self):
            heads = self.get_output_embeddings()
            heads.weight = self.text_encoder.weight
        """,
        # every module's `_tie_weights`, which 4.x's own tie_weights calls too
        """
        def tie_weights(self):
            for module in self.modules():
                module._tie_weights()
        """,
        # the head replaced by the override
        """
        def tie_weights(self):
            self.decoder.head = self.text_encoder
        """,
        # after `self` is rebound, `self.x` is another module's
        """
        def tie_weights(self):
            self = self.decoder
            self.lm = self.head
        """,
    ],
)
def test_an_override_that_may_reach_the_output_embeddings_stays_unproven(override):
    sources = _sources(override)
    assert not override_leaves_untied(sources, "LarkForSpeech", "decoder.head")
    ties = sources.ties("LarkForSpeech")
    first = next(t for t in ties if t.target == "decoder.head.weight")
    assert first.how in ("unproven", "ungated", "gated")
    assert first.how != "untied"


def test_a_class_without_an_override_ties_its_output_embeddings_as_before():
    """Without the override, 4.x's tie_weights ties the composite's output embeddings to its input embeddings (the
    text encoder's)."""
    sources = TieSources(cst.parse_module(BEFORE.replace(OVERRIDE, "")))
    assert not override_leaves_untied(sources, "LarkForSpeech", "decoder.head")
    first = next(t for t in sources.ties("LarkForSpeech") if t.target == "decoder.head.weight")
    assert (first.how, first.source) == ("embeddings", "text_encoder.tokens.weight")
