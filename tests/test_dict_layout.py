"""A past kept as one dict per layer with a dict per attention part, fairseq style (``fixtures/dictparts/incremental``,
written for this repo): the facts (parts, fields, layouts, the cross part written once, the beam reorder), the proof
that the padding mask a part keeps is dead (and where it stops when it is not), and the refusal at the first
blocker, in every era, with the file unchanged."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.facts.analysis import analyze
from cachemigrate.facts.dict_layout import find
from cachemigrate.facts.dict_proof import prove
from cachemigrate.facts.layout_types import TensorLayout
from cachemigrate.rules.loader import load_ruleset

REPO = Path(__file__).resolve().parent.parent
MODELING = REPO / "fixtures" / "dictparts" / "incremental" / "modeling_incremental.py"
SOURCE = MODELING.read_text()
ERAS = ("4.52", "4.56", "5", "portable")
# the translator hands the decoder its padding mask while it caches: the mask a past keeps is no longer None
MASK_WHILE_CACHING = SOURCE.replace("        else:\n            target_padding = None\n", "")
# the cross part keeps the mask too: its attention is handed none (the default), so it stays None
CROSS_KEEPS_MASK = SOURCE.replace(
    '"prev_key_padding_mask": padding if not reuse else None', '"prev_key_padding_mask": padding'
)


@functools.cache
def ruleset(era: str):
    return load_ruleset(era)


def _facts(code: str):
    module = cst.parse_module(code)
    info = analyze(module, ruleset("4.56").era.cache_names)
    return module, info, find(module, info, "past_key_values")


def _line(code: str, text: str) -> int:
    [line] = [n for n, line in enumerate(code.splitlines(), 1) if text in line]
    return line


def test_the_layout_is_read_as_an_encoder_decoder_caches_roles():
    module, _, layout = _facts(SOURCE)
    assert layout is not None
    assert (layout.per_layer, layout.attention, layout.carrier) == ("state", "PartAttention", "incremental_state")
    assert layout.parts == {"cross": "cross_part", "self": "self_part"}
    assert (layout.switch, layout.static, layout.saved) == ("cross", "reuse", "held")
    assert [(f.name, f.role) for f in layout.fields] == [
        ("prev_key", "key"),
        ("prev_value", "value"),
        ("prev_key_padding_mask", "extra"),
    ]
    key, value = layout.field("key"), layout.field("value")
    # stored [b, h, s, d] (what an EncoderDecoderCache holds), read back merged [b*h, s, d]
    assert key.stored == value.stored == TensorLayout(4, -2, None)
    assert key.used == value.used == TensorLayout(3, -2, "self.heads")
    assert module.code_for_node(layout.written_once.test) == '"prev_key" in held and reuse'
    assert layout.reorder == "Translator.reorder_states"
    # the normalised view: every read and write of a field by its role, the reads in the helper included
    reads = [(kind, role) for kind, role, _ in layout.accesses() if kind == "read"]
    assert reads == [("read", "key"), ("read", "value"), ("read", "extra")]


def test_the_part_key_may_be_a_string_and_a_file_of_tuples_is_not_this_layout():
    no_local = SOURCE.replace("reuse: bool = self.cross", "reuse: bool = bool(self.cross)")
    assert _facts(no_local)[2].parts == {"`cross`": "cross_part", "not `cross`": "self_part"}
    assert _facts(no_local)[2].legacy_order() is None
    one_part = SOURCE.replace("incremental_state[self.state_name] =", 'incremental_state["only"] =')
    assert _facts(one_part)[2].parts == {"self": "only"}
    tuples = SOURCE.replace('"prev_value": v.view', "0: v.view")  # a field not named by a string
    assert _facts(tuples)[2] is None
    no_values = SOURCE.replace('"prev_value": v.view(batch, self.heads, -1, self.size),', "")
    assert _facts(no_values)[2] is None


def test_the_kept_padding_mask_is_proven_dead_over_the_files_callers():
    _, info, layout = _facts(SOURCE)
    [mask] = layout.extras()
    proof = prove(info, layout, mask)
    assert proof.dead and proof.node is None
    said = "; ".join(proof.steps)
    assert "the cross part stores None" in said
    assert "EncoderLayer.forward hands it no `incremental_state`" in said
    assert "DecoderLayer.forward hands it its own `target_padding`" in said
    assert "Translator.forward sets `target_padding` to None whenever `use_cache` is true" in said
    # the cross attention is handed no mask at all: the default, None
    _, info, layout = _facts(CROSS_KEEPS_MASK)
    proof = prove(info, layout, layout.extras()[0])
    assert proof.dead and "DecoderLayer.forward hands it None" in "; ".join(proof.steps)
    # the cross attention built with its switch handed positionally is still the cross part
    positional = CROSS_KEEPS_MASK.replace(
        "PartAttention(width, heads, cross=True)", "PartAttention(width, heads, True)"
    )
    _, info, layout = _facts(positional)
    proof = prove(info, layout, layout.extras()[0])
    assert proof.dead and "DecoderLayer.forward hands it None" in "; ".join(proof.steps)
    # ... and one whose switch the code does not show is followed for either part: handed the target's mask
    # (None while caching) it is dead, handed a mask of the source it is not
    unknown = positional.replace("PartAttention(width, heads, True)", "PartAttention(width, heads, heads > 1)")
    handed = unknown.replace(
        "self.source(x, memory, incremental_state=state)", "self.source(x, memory, target_padding, state)"
    )
    _, info, layout = _facts(handed)
    assert prove(info, layout, layout.extras()[0]).dead
    source_mask = "memory.new_zeros(memory.shape[:2]).bool()"
    handed = unknown.replace(
        "self.source(x, memory, incremental_state=state)", f"self.source(x, memory, {source_mask}, state)"
    )
    _, info, layout = _facts(handed)
    proof = prove(info, layout, layout.extras()[0])
    assert not proof.dead and f"DecoderLayer.forward hands PartAttention `padding` as `{source_mask}`" in proof.why


def test_a_mask_handed_while_caching_is_not_dead_and_the_proof_stops_at_that_call():
    module, info, layout = _facts(MASK_WHILE_CACHING)
    proof = prove(info, layout, layout.extras()[0])
    assert not proof.dead
    assert "Translator.forward hands DecoderLayer `target_padding`" in proof.why
    assert isinstance(proof.node, cst.Call) and module.code_for_node(proof.node).startswith("layer(x, memory")


@pytest.mark.parametrize("era", ERAS)
def test_migrated_in_every_era_onto_an_encoder_decoder_cache(era):
    result = migrate_source(SOURCE, ruleset(era), Options(line_length=119), path=str(MODELING))
    assert result.status == "migrated" and result.diagnostics == []
    assert "CM640" in result.applied
    migrated = result.migrated
    assert "incremental_state.self_attention_cache.update(" in migrated
    assert "incremental_state.is_updated[self.layer_idx] = True" in migrated
    assert "past_key_values[idx]" not in migrated and "incremental_state[self.state_name] =" not in migrated


@pytest.mark.parametrize("era", ERAS)
def test_a_layout_the_rule_cannot_move_is_still_refused_at_its_first_blocker(era):
    # the written-once switch is no local of the attention: the cross part is not told from the self part
    no_local = SOURCE.replace("reuse: bool = self.cross", "reuse: bool = bool(self.cross)")
    result = migrate_source(no_local, ruleset(era), Options(line_length=119), path=str(MODELING))
    assert result.status == "failed" and result.migrated == no_local
    [diagnostic] = result.diagnostics
    assert diagnostic.code == "CM917"
    # its first blocker: without the switch's local, the mask the cross part keeps is not proven dead
    assert diagnostic.line == _line(no_local, '"prev_key_padding_mask": padding if not reuse else None')


@pytest.mark.parametrize("era", ERAS)
def test_a_layout_the_rule_does_not_move_names_the_rule_and_why(era):
    # keys and values stored [batch, seq, heads, dim]: not an EncoderDecoderCache's layout
    code = SOURCE.replace(
        '"prev_key": k.view(batch, self.heads, -1, self.size)', '"prev_key": k.view(batch, -1, self.heads, self.size)'
    )
    code = code.replace(
        '"prev_value": v.view(batch, self.heads, -1, self.size)',
        '"prev_value": v.view(batch, -1, self.heads, self.size)',
    )
    result = migrate_source(code, ruleset(era), Options(line_length=119), path=str(MODELING))
    assert result.status == "failed" and result.migrated == code
    [diagnostic] = result.diagnostics
    assert diagnostic.code == "CM917" and diagnostic.line == _line(code, "incremental_state[self.state_name] = {")
    assert f"rule CM640 of era {era}" in diagnostic.message
    assert "stored [batch, heads, seq, dim]" in diagnostic.message


def test_a_live_mask_is_the_blocker_named_at_the_call_that_hands_it():
    result = migrate_source(MASK_WHILE_CACHING, ruleset("4.56"), Options(line_length=119), path=str(MODELING))
    assert result.status == "failed" and result.migrated == MASK_WHILE_CACHING
    [diagnostic] = result.diagnostics
    assert diagnostic.code == "CM917"
    assert diagnostic.line == _line(MASK_WHILE_CACHING, "x, state = layer(x, memory")
    assert "keeps `prev_key_padding_mask`" in diagnostic.message and "not proven dead" in diagnostic.message


def _load(code: str, tmp_path: Path, name: str):
    path = tmp_path / f"{name}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_what_the_proof_says_is_what_the_model_does(tmp_path):
    """The past the translator hands out keeps None as its mask even when it is given a padding mask; with the
    mask handed while caching (the variant the proof refuses), the past keeps it."""
    torch = pytest.importorskip("torch")
    source, target = torch.tensor([[3, 4, 5, 6]]), torch.tensor([[1, 7, 8]])
    padding = torch.tensor([[True, False, False]])
    for code, name, kept in ((SOURCE, "dead_mask", False), (MASK_WHILE_CACHING, "live_mask", True)):
        torch.manual_seed(0)
        model = _load(code, tmp_path, name).Translator().eval()
        _, past = model(source, target, target_padding=padding, use_cache=True)
        masks = [part["prev_key_padding_mask"] for layer in past for part in layer.values()]
        assert any(mask is not None for mask in masks) == kept
        assert all(layer["cross_part"]["prev_key_padding_mask"] is None for layer in past)


def test_a_layers_dict_is_the_encoder_decoder_4_tuple_an_encoder_decoder_cache_takes(tmp_path):
    """The dict of a cached step, read in :meth:`DictLayout.legacy_order`, is the (self K, self V, cross K, cross V)
    tuple of the encoder-decoder family: on the installed transformers, ``EncoderDecoderCache.from_legacy_cache``
    of it holds the target's length in its self part and the source's in its cross part, and gives the same
    tensors back."""
    torch = pytest.importorskip("torch")
    cache_utils = pytest.importorskip("transformers.cache_utils")
    order = _facts(SOURCE)[2].legacy_order()
    assert order == (
        ("self_part", "prev_key"),
        ("self_part", "prev_value"),
        ("cross_part", "prev_key"),
        ("cross_part", "prev_value"),
    )
    torch.manual_seed(0)
    model = _load(SOURCE, tmp_path, "legacy_order").Translator().eval()
    source, target = torch.tensor([[3, 4, 5, 6, 7]]), torch.tensor([[1, 7, 8]])
    _, past = model(source, target, use_cache=True)
    legacy = tuple(tuple(layer[part][field] for part, field in order) for layer in past)
    cache = cache_utils.EncoderDecoderCache.from_legacy_cache(legacy)
    assert cache.self_attention_cache.get_seq_length() == target.shape[1]
    assert cache.cross_attention_cache.get_seq_length() == source.shape[1]
    for mine, theirs in zip(legacy, cache.to_legacy_cache()):
        assert all(torch.equal(a, b) for a, b in zip(mine, theirs))
    # the next step, fed the dicts back, grows the self part by one and leaves the cross part as it was
    _, past = model(source, torch.tensor([[9]]), past_key_values=past, use_cache=True)
    assert past[0]["self_part"]["prev_key"].shape[-2] == target.shape[1] + 1
    assert past[0]["cross_part"]["prev_key"].shape[-2] == source.shape[1]


def test_the_installed_fsmt_is_read_the_same_way_and_its_dicts_are_an_encoder_decoder_caches():
    """The fairseq port of the installed transformers (FSMT): the same facts, its mask proven dead, migrated by
    CM640 with nothing left over; a tiny model's cached step, read in the dicts' legacy order, is an EncoderDecoderCache whose
    self part holds the decoded tokens and whose cross part holds the source, and a padding mask handed to the
    model while it caches is not kept."""
    torch = pytest.importorskip("torch")
    fsmt = pytest.importorskip("transformers.models.fsmt.modeling_fsmt")
    cache_utils = pytest.importorskip("transformers.cache_utils")
    code = Path(fsmt.__file__).read_text()
    _, info, layout = _facts(code)
    assert layout.parts == {"cross": "encoder_decoder", "self": "self"} and layout.written_once is not None
    assert [f.name for f in layout.extras()] == ["prev_key_padding_mask"]
    assert prove(info, layout, layout.extras()[0]).dead
    result = migrate_source(code, ruleset("4.56"), Options(line_length=119), path="modeling_fsmt.py")
    assert result.status == "migrated" and result.diagnostics == [] and "CM640" in result.applied
    config = fsmt.FSMTConfig(
        langs=["en", "de"],
        src_vocab_size=40,
        tgt_vocab_size=40,
        d_model=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=64,
        dropout=0.0,
    )
    torch.manual_seed(0)
    model = fsmt.FSMTForConditionalGeneration(config).eval()
    source, target = torch.tensor([[5, 6, 7, 8, 2]]), torch.tensor([[2, 9, 10]])
    with torch.no_grad():
        out = model(
            input_ids=source,
            decoder_input_ids=target,
            decoder_attention_mask=torch.tensor([[0, 1, 1]]),
            use_cache=True,
        )
    past = out.past_key_values
    assert all(part["prev_key_padding_mask"] is None for layer in past for part in layer.values())
    order = layout.legacy_order()
    cache = cache_utils.EncoderDecoderCache.from_legacy_cache(
        tuple(tuple(layer[part][field] for part, field in order) for layer in past)
    )
    # FSMT's cached forward embeds the whole target and runs its last token only
    assert cache.self_attention_cache.get_seq_length() == 1
    assert cache.cross_attention_cache.get_seq_length() == source.shape[1]


def test_the_installed_fsmt_migrated_for_its_era_runs_as_the_original(tmp_path):
    """FSMT of the installed transformers migrated for the era of this runtime (4.52: transformers 4.42-4.53): with
    the original's weights, a list of dicts handed in gives the same logits and a list of dicts back, an
    EncoderDecoderCache handed in comes back as the same object, its cross part written once, and greedy and beam
    tokens are the original's."""
    import importlib.util
    import sys

    torch = pytest.importorskip("torch")
    fsmt = pytest.importorskip("transformers.models.fsmt.modeling_fsmt")
    cache_utils = pytest.importorskip("transformers.cache_utils")
    transformers = pytest.importorskip("transformers")
    if not transformers.__version__.startswith("4.5"):
        pytest.skip("era 4.52's runtime is transformers 4.42-4.53")
    code = Path(fsmt.__file__).read_text()
    result = migrate_source(code, ruleset("4.52"), Options(line_length=119), path="modeling_fsmt.py")
    assert result.status == "migrated"
    name = "transformers.models.fsmt._cachemigrate_migrated"
    (tmp_path / "modeling_fsmt.py").write_text(result.migrated)
    spec = importlib.util.spec_from_file_location(name, tmp_path / "modeling_fsmt.py")
    migrated = importlib.util.module_from_spec(spec)
    sys.modules[name] = migrated
    try:
        spec.loader.exec_module(migrated)
    finally:
        sys.modules.pop(name, None)
    config = fsmt.FSMTConfig(
        langs=["en", "de"], src_vocab_size=40, tgt_vocab_size=40, d_model=16, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
        max_position_embeddings=64, dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    original = fsmt.FSMTForConditionalGeneration(config).eval()
    model = migrated.FSMTForConditionalGeneration(config).eval()
    model.load_state_dict(original.state_dict())
    source, target = torch.tensor([[5, 6, 7, 8, 2], [5, 9, 9, 3, 2]]), torch.tensor([[2, 9, 10, 11], [2, 3, 4, 5]])
    cache = cache_utils.EncoderDecoderCache(cache_utils.DynamicCache(), cache_utils.DynamicCache())
    with torch.no_grad():
        past_a = past_b = None
        for end in range(2, target.shape[1] + 1):
            a = original(source, decoder_input_ids=target[:, :end], past_key_values=past_a, use_cache=True)
            b = model(source, decoder_input_ids=target[:, :end], past_key_values=past_b, use_cache=True)
            c = model(source, decoder_input_ids=target[:, :end], past_key_values=cache, use_cache=True)
            past_a, past_b = a.past_key_values, b.past_key_values
            assert isinstance(past_b, list) and set(past_b[0]) == set(past_a[0])
            assert c.past_key_values is cache
            assert torch.equal(a.logits, b.logits) and torch.equal(a.logits, c.logits)
            for got, want in zip(past_b, past_a):
                for part in want:
                    assert torch.equal(got[part]["prev_key"], want[part]["prev_key"])
        assert cache.cross_attention_cache.get_seq_length() == source.shape[1]
        for beams in (1, 3):
            want = original.generate(source, num_beams=beams, max_new_tokens=6, do_sample=False)
            got = model.generate(source, num_beams=beams, max_new_tokens=6, do_sample=False)
            assert torch.equal(want, got)
