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


def _loop(code: str):
    from cachemigrate.actions.tie_loops import loop_mapping

    sources = TieSources(cst.parse_module(code))
    return loop_mapping(sources, sources.classes["WrenModel"])


def test_a_list_built_in_tying_loops_is_read_as_the_mapping_loop_for_init():
    """fixtures/5/CM420/loop_before.py: both methods' loops (a tie through the getters' locals, and one parameter
    assigned another's) give one loop over the same range; the lines dropped are each method's `= []` and append."""
    found, why = _loop((CM420 / "loop_before.py").read_text())
    assert why == "" and found.methods == ["_tie_weights", "tie_weights"]
    assert found.code == (
        "self._tied_weights_keys = {}\n"
        "for i in range(self.config.n_layer + 1):\n"
        '    self._tied_weights_keys[f"heads.{i}.weight"] = f"words.{i + 1}.weight"\n'
    )
    code = (CM420 / "loop_before.py").read_text()
    tie = "heads[i].weight = words[i + 1].weight"
    assert tie in code
    assert _loop(code.replace(tie, "self._tie_or_clone_weights(heads[i], words[i + 1])"))[0].code == found.code
    assert sorted(cst.Module([]).code_for_node(line.body[0]) for line in found.removed) == sorted(
        2 * ["self._tied_weights_keys = []", 'self._tied_weights_keys.append(f"heads.{i}.weight")']
    )


def test_a_tying_loop_not_read_as_a_mapping_says_why():
    """What `__init__` could not compute, what differs between the methods, a name `__init__` already uses, a tie
    that is not one indexed module's, a list read elsewhere: no mapping, and the reason names the construct."""
    code = (CM420 / "loop_before.py").read_text()
    changed = {
        "            for i in range(self.config.n_layer + 1):\n                heads[i]": ("`range(count)` reads more than", "            count = self.config.n_layer + 1\n            for i in range(count):\n                heads[i]"),
        "= words[i + 1].weight": ("build different lists", "= words[i + 2].weight"),
        "        # weights, then the ties": ("already uses the loop's name (i)", "        i = 0\n        # weights, then the ties"),
        "heads[i].weight = words[i + 1].weight": ("is not one module of an indexed list", "self._tie_or_clone_weights(heads[i], words.first)"),
        "        for module in self.modules():": ("other than by one `= []`", "        print(self._tied_weights_keys)\n        for module in self.modules():"),
    }  # fmt: skip
    for old, (expected, new) in changed.items():
        assert old in code, old
        found, why = _loop(code.replace(old, new, 1))
        assert found is None and expected in why, (expected, why)


def test_a_list_built_in_an_ungated_loop_is_refused():
    """fixtures/5/CM420/loop_refused.py: 5.x ties a mapping only when `tie_word_embeddings` is true."""
    from cachemigrate.actions.tie_loops import loop_mapping

    sources = TieSources(cst.parse_module((CM420 / "loop_refused.py").read_text()))
    found, why = loop_mapping(sources, sources.classes["FinchModel"])
    assert found is None and "whatever `config.tie_word_embeddings` says" in why


def test_a_default_get_input_embeddings_that_raises_is_no_tie():
    """fixtures/5/CM420/raises_before.py: the chain through `base_model_prefix` ends at a class of the file with no
    `get_input_embeddings` and no attribute of that name: 4.x raised there, so the head's tie is "raises" (never
    tied). An `embed_tokens` or `model` attribute (4.57's fallbacks), a base from elsewhere, the prefix attribute
    assigned, or a `get_input_embeddings` make it something else."""
    from cachemigrate.actions.tie_default import default_input_raises

    code = (CM420 / "raises_before.py").read_text()
    sources = TieSources(cst.parse_module(code))
    assert default_input_raises(sources, "StiltForMaskedLM") == "StiltModel"
    (tie,) = [t for t in sources.ties("StiltForMaskedLM") if t.target == "scores.weight"]
    assert tie.how == "raises" and "`StiltModel`" in tie.why
    assert resolve(sources.ties("StiltForMaskedLM"), "scores.weight")[0] == []
    variants = [
        code.replace("self.text = nn", "self.embed_tokens = nn"),
        code.replace("class StiltModel(StiltPreTrainedModel):", "class StiltModel(StiltPreTrainedModel, Mixin):"),
        code.replace("        self.image = nn", "        self.stilt = self.text\n        self.image = nn"),
        code.replace("    def forward(self, input_ids):\n        return self.image", "    def get_input_embeddings(self):\n        return self.text\n\n    def forward(self, input_ids):\n        return self.image"),
    ]  # fmt: skip
    for variant in variants:
        assert variant != code
        sources = TieSources(cst.parse_module(variant))
        assert default_input_raises(sources, "StiltForMaskedLM") is None, variant
        assert all(t.how != "raises" for t in sources.ties("StiltForMaskedLM"))
