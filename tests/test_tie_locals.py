"""CM420 reads a sub-model built through a local name (`core = Model(config)`, then `self.core = core`) as it reads
`self.core = Model(config)`: for 4.x's default `get_input_embeddings` through `base_model_prefix`, and for the ties of
the sub-model, written in full from the head. A top-level `self.a.weight = self.b.weight` in `__init__` is a tie
from construction, whatever the config says, and the same tie again in a `_tie_weights` is a re-tie
(fixtures/5/CM420/local_before.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import libcst as cst

from cachemigrate.actions.tie_sources import TieSources, resolve_split

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_era_rules import run_rule

CM420 = Path(__file__).resolve().parent.parent / "fixtures" / "5" / "CM420"
BEFORE = CM420 / "local_before.py"


def _sources(code: str) -> TieSources:
    return TieSources(cst.parse_module(code))


def test_a_sub_model_bound_to_a_local_first_is_the_attribute_base_model_prefix_names():
    sources = _sources(BEFORE.read_text())
    assert sources.attributes("WrenForTranslation") == {"core": "WrenModel"}
    assert sources.input_embeddings("WrenForTranslation") == "core.encoder.tokens"


def test_a_local_bound_twice_is_not_followed_and_the_head_is_refused():
    code = BEFORE.read_text().replace(
        "        core = WrenModel(config)\n",
        "        core = WrenModel(config)\n        core = WrenEncoder(config, None)\n",
    )
    assert _sources(code).attributes("WrenForTranslation") == {}
    migrated, _, diagnostics = run_rule("5", "CM420", code, str(BEFORE))
    assert [d.code for d in diagnostics] == ["CM420"] and "WrenForTranslation" in str(diagnostics[0])
    head = migrated[migrated.index("class WrenForTranslation") :]
    assert '_tied_weights_keys = ["decoder.tokens.weight", "decoder.proj.weight"]' in head


def test_the_head_through_a_local_writes_what_the_head_built_directly_writes():
    code = BEFORE.read_text()
    direct = code.replace(
        "        core = WrenModel(config)\n        self.core = core\n", "        self.core = WrenModel(config)\n"
    )
    assert direct != code
    through_local, _, diagnostics = run_rule("5", "CM420", code, str(BEFORE))
    built_directly, _, direct_diagnostics = run_rule("5", "CM420", direct, str(BEFORE))
    assert diagnostics == [] and direct_diagnostics == []
    head = through_local[through_local.index("class WrenForTranslation") :]
    assert head.replace(
        "        core = WrenModel(config)\n        self.core = core\n", "        self.core = WrenModel(config)\n"
    ) == (built_directly[built_directly.index("class WrenForTranslation") :])
    assert '"core.decoder.proj.weight": "core.encoder.tokens.weight"' in head


def test_an_init_weight_assignment_is_a_tie_from_construction_and_its_ungated_re_tie_is_dropped():
    ties = _sources(BEFORE.read_text()).ties("WrenDecoder")
    assert [(t.target, t.source, t.how) for t in ties] == [("proj.weight", "tokens.weight", "built")]
    pairs, why = resolve_split(ties, "proj.weight")[0], resolve_split(ties, "proj.weight")[3]
    assert why is None and pairs == [("proj.weight", "tokens.weight")]


def test_without_the_init_assignment_the_decoders_own_tie_stays_ungated_and_is_refused():
    code = BEFORE.read_text().replace("        self.proj.weight = self.tokens.weight\n", "")
    ties = _sources(code).ties("WrenDecoder")
    assert [(t.target, t.source, t.how) for t in ties] == [("tokens.weight", "proj.weight", "ungated")]
    assert "whatever `config.tie_word_embeddings` says" in resolve_split(ties, "tokens.weight")[3]


def test_an_init_weight_assignment_under_a_test_is_not_read_as_a_construction_tie():
    code = BEFORE.read_text().replace(
        "        self.proj.weight = self.tokens.weight\n",
        "        if config.share_projection:\n            self.proj.weight = self.tokens.weight\n",
    )
    ties = _sources(code).ties("WrenDecoder")
    assert all(t.how != "built" for t in ties)
