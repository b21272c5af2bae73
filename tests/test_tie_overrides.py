"""How CM420 reads the ties of a model's own `tie_weights` (cachemigrate/actions/tie_sources.py), which CM427 keeps
running on 5.x: through the method's local names, `self.<method>()` chains, an `and` gate, and not past a
statement that rebinds `self`."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst

from cachemigrate.actions.tie_sources import TieSources, resolve, resolve_split

CM420 = Path(__file__).resolve().parent.parent / "fixtures" / "5" / "CM420"

HEAD = '''
from torch import nn
from transformers.modeling_utils import PreTrainedModel


class TernPreTrainedModel(PreTrainedModel):
    base_model_prefix = "model"


class TernDecoder(TernPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.tokens = nn.Embedding(4, 4)

    def get_input_embeddings(self):
        return self.tokens


class TernModel(TernPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.decoder = TernDecoder(config)

    def get_decoder(self):
        return self.decoder


class TernForCausalLM(TernPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.model = TernModel(config)
        self.lm_head = nn.Linear(4, 4, bias=False)

    def get_output_embeddings(self):
        return self.lm_head

    def get_decoder(self):
        return self.model.get_decoder()

'''


def _ties(override: str) -> list:
    code = HEAD + textwrap.indent(textwrap.dedent(override), "    ")
    return TieSources(cst.parse_module(code)).ties("TernForCausalLM")


def test_a_tie_through_local_names_and_method_chains_is_read_with_its_gate():
    ties = _ties(
        """
        def tie_weights(self):
            output_embeddings = self.get_output_embeddings()
            if output_embeddings is not None and getattr(self.config, "tie_word_embeddings", True):
                word_embeddings = self.get_decoder().get_input_embeddings()
                self._tie_or_clone_weights(output_embeddings, word_embeddings)
        """
    )
    assert resolve(ties, "lm_head.weight") == ([("lm_head.weight", "model.decoder.tokens.weight")], None)
    # the entry that names the source gives the same tie
    assert resolve(ties, "model.decoder.tokens.weight") == ([("lm_head.weight", "model.decoder.tokens.weight")], None)


def test_without_the_gate_the_tie_is_ungated_and_refused():
    ties = _ties(
        """
        def tie_weights(self):
            head = self.get_output_embeddings()
            head.weight = self.model.decoder.get_input_embeddings().weight
        """
    )
    pairs, why = resolve(ties, "lm_head.weight")
    assert pairs == [] and "whatever `config.tie_word_embeddings` says" in why


def test_a_name_bound_twice_is_not_read_as_either_value():
    ties = _ties(
        """
        def tie_weights(self):
            source = self.model.decoder.tokens
            if self.config.tie_word_embeddings:
                source = self.model.decoder.get_input_embeddings()
                self._tie_or_clone_weights(self.lm_head, source)
        """
    )
    pairs, why = resolve(ties, "lm_head.weight")
    assert pairs == [] and "overrides `tie_weights`" in why


def test_statements_after_self_is_rebound_are_not_read():
    ties = _ties(
        """
        def tie_weights(self):
            if self.config.tie_word_embeddings:
                self = getattr(self, self.base_model_prefix)
                self._tie_or_clone_weights(self.lm_head, self.decoder.tokens)
        """
    )
    pairs, why = resolve(ties, "lm_head.weight")
    assert pairs == [] and "overrides `tie_weights`" in why


def test_a_module_handed_only_under_a_config_test_names_the_test():
    """Read without following the test, a conditional tie is refused, naming the test and where a mapping under it
    goes (fixtures/5/CM420/conditional_before.py)."""
    code = (CM420 / "conditional_before.py").read_text()
    pairs, why = resolve(TieSources(cst.parse_module(code)).ties("AukModel"), "encoder.tokens.weight")
    assert pairs == []
    assert "only when `self.config.share_embeddings` is true" in why and "before `self.post_init()`" in why


def test_a_conditional_tie_is_absent_when_its_test_is_false_and_followed_when_true():
    """fixtures/5/CM420/conditional_before.py: the head's projection is tied to the decoder's embedding, which is
    the model's shared one only when the config shares: the chain stops before that link when the test is false."""
    ties = TieSources(cst.parse_module((CM420 / "conditional_before.py").read_text())).ties("AukForGeneration")
    assert resolve_split(ties, "model.encoder.tokens.weight") == (
        [], [("model.encoder.tokens.weight", "model.shared.weight")], {"self.config.share_embeddings"}, None
    )
    assert resolve_split(ties, "head.weight") == (
        [("head.weight", "model.decoder.tokens.weight")],
        [("head.weight", "model.shared.weight")],
        {"self.config.share_embeddings"},
        None,
    )


def test_a_sub_models_test_is_not_followed_when_the_sub_model_is_built_from_another_config():
    """The sub-model reads `self.config`, which is the head's only when the head hands it its own `config`."""
    code = (CM420 / "conditional_before.py").read_text().replace(
        "self.model = AukModel(config)", "self.model = AukModel(config.text_config)"
    )
    ties = TieSources(cst.parse_module(code)).ties("AukForGeneration")
    off, on, tests, why = resolve_split(ties, "model.encoder.tokens.weight")
    assert (off, on, tests) == ([], [], set()) and "only when `self.config.share_embeddings` is true" in why


def test_ties_under_two_tests_are_refused_naming_both():
    code = (CM420 / "conditional_refused.py").read_text()
    ties = TieSources(cst.parse_module(code)).ties("AukModel")
    tests = set()
    for key in ("encoder.tokens.weight", "decoder.tokens.weight"):
        tests |= resolve_split(ties, key)[2]
    assert tests == {"config.share_encoder", "config.share_decoder"}


def test_a_gated_tie_back_to_the_output_embeddings_is_a_re_tie_not_a_cycle():
    """`_tie_weights` tying the input embeddings to the head again (after 4.x tied the head to them): the head's
    source stays the input embeddings, never the head itself."""
    ties = _ties(
        """
        def get_input_embeddings(self):
            return self.model.decoder.tokens

        def _tie_weights(self):
            if self.config.tie_word_embeddings:
                self._tie_or_clone_weights(self.model.decoder.tokens, self.lm_head)
        """
    )
    assert resolve(ties, "lm_head.weight") == ([("lm_head.weight", "model.decoder.tokens.weight")], None)


def test_the_same_tie_back_without_the_gate_is_still_refused():
    """Ungated, the tie back holds when `tie_word_embeddings` is false too, which 4.x's own tie does not cover."""
    ties = _ties(
        """
        def get_input_embeddings(self):
            return self.model.decoder.tokens

        def _tie_weights(self):
            self._tie_or_clone_weights(self.model.decoder.tokens, self.lm_head)
        """
    )
    pairs, why = resolve(ties, "model.decoder.tokens.weight")
    assert pairs == [] and "whatever `config.tie_word_embeddings` says" in why


def test_an_ungated_re_tie_of_a_module_handed_to_the_wrapped_model_is_dropped():
    """fixtures/5/CM420/wrapper_before.py: the wrapper ties again, without the gate, the embedding its decoder keeps
    as `tokens if tokens is not None else ...`; the list's three entries resolve to the wrapper's embedding."""
    sources = TieSources(cst.parse_module((CM420 / "wrapper_before.py").read_text()))
    ties = sources.ties("PloverForCausalLM")
    assert not [t for t in ties if t.how == "ungated"]
    for key in ("body.tokens.weight", "body.decoder.tokens.weight"):
        assert resolve(ties, key) == ([("body.decoder.tokens.weight", "body.tokens.weight")], None)
    assert resolve(ties, "head.weight") == ([("head.weight", "body.tokens.weight")], None)
    # the wrapper alone: the same two parameters, one by construction
    assert [(t.target, t.source, t.how) for t in sources.ties("PloverWrapper")] == [
        ("decoder.tokens.weight", "tokens.weight", "built")
    ]


def _given(head_init: str) -> tuple[list, str | None]:
    """fixtures/5/CM420/given_before.py with the head's `self.core = ...` line replaced."""
    code = (CM420 / "given_before.py").read_text()
    line = "        self.core = GrebeModel(config, encoder, decoder=GrebeTextDecoder(config))\n"
    assert line in code
    ties = TieSources(cst.parse_module(code.replace(line, head_init))).ties("GrebeForFeaturesToText")
    return resolve(ties, "head.weight")


def test_a_sub_model_given_its_modules_decides_its_isinstance_tests():
    assert _given("        self.core = GrebeModel(config, encoder, decoder=GrebeTextDecoder(config))\n") == (
        [("head.weight", "core.decoder.front.tokens.weight")],
        None,
    )
    # the encoder given as the text one (a subclass of the decoder's class): the first test holds
    given = "        self.core = GrebeModel(config, GrebeTextEncoder(config))\n"
    assert _given(given) == ([("head.weight", "core.encoder.front.tokens.weight")], None)


def test_a_sub_model_not_given_a_text_module_is_still_refused():
    for init in (
        "        self.core = GrebeModel(config)\n",  # the defaults: no test holds, `get_input_embeddings` gives None
        "        self.core = GrebeModel(config, encoder, decoder=encoder)\n",
    ):
        pairs, why = _given(init)
        assert pairs == [] and "returns no `self.<path>`" in why, init


def test_a_list_built_in_a_tying_loop_is_refused_with_the_mapping_loop_to_write():
    """fixtures/5/CM420/instance_list_refused.py: the message gives the loop that builds the mapping, read from the
    loop's tie (its index expressions kept); a loop whose tie is not read gives the generic advice."""
    from cachemigrate.actions.tie_weights_mapping import _loop_mapping

    code = (CM420 / "instance_list_refused.py").read_text()
    module = cst.parse_module(code)
    sources = TieSources(module)
    cls = sources.classes["WrenModel"]
    assert _loop_mapping(sources, cls, "tie_weights") == (
        "self._tied_weights_keys = {}`, then `for i in range(2): "
        'self._tied_weights_keys[f"heads.{i}.weight"] = f"words.{i + 1}.weight"'
    )
    unread = code.replace("self.words[i + 1].weight", "self.words[i + 1].weight.detach()")
    sources = TieSources(cst.parse_module(unread))
    assert _loop_mapping(sources, sources.classes["WrenModel"], "tie_weights") == ""
