"""The remote-code styles of ``fixtures/remote/<style>/`` (a modeling file and its configuration, as a
trust_remote_code folder; written for this repo in the idioms published remote code uses): each runs on the
installed transformers with a cache that agrees with a run without one; the styles the engine migrates give the
original's tensors bit for bit; the others, and near-misses of those that migrate, are refused at the construct
that blocks them, with the real reason."""

from __future__ import annotations

import functools
import os
import shutil
import textwrap
from pathlib import Path

import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset

REMOTE = Path(__file__).resolve().parent.parent / "fixtures" / "remote"
STYLES = sorted(p.name for p in REMOTE.iterdir() if p.is_dir())
# measured: the styles each era migrates (the others are refused; see the tests below for why)
MIGRATES = {
    "4.52": {"bshd", "einops", "merged", "zipped", "fusedlist", "stacked", "seqfirst"},
    "4.56": {"bshd", "einops", "merged", "zipped", "fusedlist", "stacked", "seqfirst"},
    "5": {"bshd", "einops", "merged", "zipped", "fusedlist", "stacked", "seqfirst"},
    "portable": {"bshd", "einops", "merged", "zipped", "fusedlist", "stacked", "seqfirst"},
}
# the newest 5.x, where eras 5 and portable read the cache off `cache.layers` (tests marked `runtimes`)
TF5_PYTHON = Path(os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"))


@functools.cache
def ruleset(era: str):
    return load_ruleset(era)


def modeling(style: str) -> Path:
    return REMOTE / style / f"modeling_{style}.py"


def migrate(code: str, era: str, name: str = "modeling_x.py"):
    return migrate_source(code, ruleset(era), Options(line_length=119), path=name)


def _line(code: str, text: str) -> int:
    [line] = [n for n, line in enumerate(code.splitlines(), 1) if text in line]
    return line


# -- the corpus runs --------------------------------------------------------------------------------------------


def _load(folder: Path, style: str):
    from cachemigrate.probe.loading import load_modeling_module

    module = load_modeling_module(folder / f"modeling_{style}.py")
    config_class = next(v for k, v in vars(module).items() if k.endswith("Config") and isinstance(v, type))
    head = next(
        v
        for v in vars(module).values()
        if isinstance(v, type) and "prepare_inputs_for_generation" in vars(v) and v.__module__ == module.__name__
    )
    return module, config_class, head


def _pair(folder: Path, migrated: Path, style: str):
    import torch

    _, config_class, head = _load(folder, style)
    _, _, new_head = _load(migrated, style)
    torch.manual_seed(0)
    original = head(config_class()).eval()
    new = new_head(config_class()).eval()
    new.load_state_dict(original.state_dict())
    return original, new


def test_the_corpus_has_every_style():
    assert set(STYLES) >= {"seqfirst", "bshd", "einops", "merged", "fusedlist", "stacked", "zipped", "pasthook"}
    for style in STYLES:
        assert (REMOTE / style / f"configuration_{style}.py").is_file()
        assert modeling(style).is_file()


@pytest.mark.parametrize("style", STYLES)
def test_each_style_runs_and_its_cache_agrees_with_no_cache(style):
    """The prompt, then two tokens fed one by one with the past the model returned, give the logits of the whole
    sequence run without a cache: every fixture is a working cached model on the installed transformers."""
    import torch

    _, config_class, head = _load(REMOTE / style, style)
    torch.manual_seed(0)
    model = head(config_class()).eval()
    ids = torch.randint(3, 99, (2, 7))
    with torch.no_grad():
        full = model(input_ids=ids, use_cache=False).logits
        out = model(input_ids=ids[:, :5], use_cache=True)
        steps = [out.logits]
        for i in (5, 6):
            out = model(input_ids=ids[:, i : i + 1], past_key_values=out.past_key_values, use_cache=True)
            steps.append(out.logits)
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


# -- what migrates ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "style,era", sorted((style, era) for era, styles in MIGRATES.items() if era != "4.52" for style in styles)
)
def test_the_styles_that_migrate(style, era):
    code = modeling(style).read_text()
    result = migrate(code, era, modeling(style).name)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    again = migrate(result.migrated, era, modeling(style).name)
    assert again.status == "clean" and again.migrated == result.migrated


@pytest.mark.parametrize(
    "style,era", [(style, era) for era in ("4.52", "portable") for style in sorted(MIGRATES[era])]
)
def test_the_migrated_model_gives_the_originals_tensors_bit_for_bit(style, era, tmp_path):
    """Eras 4.52 and portable on the installed transformers (4.51.3): the layout is converted at the attention
    (``[b, s, h, d]``, ``[b*h, s, d]``: views around ``cache.update``), or kept where a Cache cannot hold it
    (fused keys and values: the Cache holds the halves), and tuples at the model's boundary are converted the same
    way both ways (portable: ``DynamicCache(tuple)`` of the layers viewed in the Cache's layout, given back through
    ``to_legacy_cache`` here); either way the logits and every cached tensor handed back in the original's
    container are the original's, bit for bit, and a DynamicCache passed in gives the same logits."""
    import torch
    from transformers.cache_utils import DynamicCache

    result = migrate(modeling(style).read_text(), era, modeling(style).name)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    shutil.copytree(REMOTE / style, tmp_path / style)
    (tmp_path / style / modeling(style).name).write_text(result.migrated)
    original, new = _pair(REMOTE / style, tmp_path / style, style)
    ids = torch.randint(3, 99, (2, 6))
    with torch.no_grad():
        old_out = original(input_ids=ids[:, :4], use_cache=True)
        new_out = new(input_ids=ids[:, :4], use_cache=True)
        assert torch.equal(old_out.logits, new_out.logits)
        assert type(new_out.past_key_values) is type(old_out.past_key_values)
        old_step = original(input_ids=ids[:, 4:5], past_key_values=old_out.past_key_values, use_cache=True)
        new_step = new(input_ids=ids[:, 4:5], past_key_values=new_out.past_key_values, use_cache=True)
        assert torch.equal(old_step.logits, new_step.logits)
        old_past, new_past = old_step.past_key_values, new_step.past_key_values
        assert type(new_past) is type(old_past) and len(old_past) == len(new_past)
        for old_layer, new_layer in zip(old_past, new_past):
            if isinstance(old_layer, torch.Tensor):
                assert torch.equal(old_layer, new_layer) and old_layer.stride() == new_layer.stride()
            else:
                assert all(torch.equal(a, b) and a.stride() == b.stride() for a, b in zip(old_layer, new_layer))
        cache = DynamicCache()
        first = new(input_ids=ids[:, :4], past_key_values=cache, use_cache=True)
        assert first.past_key_values is cache and torch.equal(first.logits, old_out.logits)
        second = new(input_ids=ids[:, 4:5], past_key_values=cache, use_cache=True)
        assert torch.equal(second.logits, old_step.logits) and cache.get_seq_length() == 5


@pytest.mark.runtimes
@pytest.mark.skipif(not TF5_PYTHON.is_file(), reason=f"no transformers 5.x interpreter at {TF5_PYTHON}")
@pytest.mark.parametrize("style,era", [(s, e) for e in ("5", "portable") for s in ("bshd", "fusedlist", "seqfirst")])
def test_the_migrated_file_on_transformers_5_gives_the_originals_tensors_bit_for_bit(style, era, tmp_path):
    """The cross-version probe (the original on 4.51.3, the migrated file on the newest 5.x), for the layouts
    whose tuples the model converts at its boundary (``[b, s, h, d]``, ``[s, b, h, d]``, fused): a tuple in gives a tuple out in the
    original's layout and container (``DynamicCache(tuple)`` of the layers viewed in the Cache's layout, given
    back off ``cache.layers``: 5.x has no ``to_legacy_cache``), a Cache in comes back as the same object, and no
    check diverges: the largest difference between any logits or cached tensor of the two is 0 (bit for bit)."""
    from cachemigrate.probe.cross import run_cross_probe
    from cachemigrate.probe.report import PASS, SKIP

    result = migrate(modeling(style).read_text(), era, modeling(style).name)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    shutil.copytree(REMOTE / style, tmp_path / style)
    migrated = tmp_path / style / modeling(style).name
    migrated.write_text(result.migrated)
    report = run_cross_probe(modeling(style), migrated, migrated_python=str(TF5_PYTHON), timeout=300)
    statuses = {r.name: r.status for r in report.results}
    assert set(statuses.values()) <= {PASS, SKIP}, [(r.name, r.status, r.detail) for r in report.results]
    for check in ("tuple_in_tuple_out", "use_cache_false_with_past", "return_dict_false", "cache_in_same_cache"):
        assert statuses[check] == PASS, (check, statuses)
    assert report.max_abs_diff == 0.0, report.header()


# -- what is refused, and why -----------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ["4.52", "4.56", "5", "portable"])
def test_a_sequence_first_past_length_off_the_sequence_axis_is_named(era):
    """seqfirst near-miss: the past length read off axis 1 of [s, b, h, d] (the batch), in the mask helper and in
    the model: refused at each read, saying what the original reads and which axis holds the sequence; never
    'wraps its model' (attention, blocks and model are all in the file)."""
    read = "past_length = past_key_values[0][0].shape[1]"
    code = modeling("seqfirst").read_text().replace("past_length = past_key_values[0][0].shape[0]", read)
    result = migrate(code, era, "modeling_seqfirst.py")
    assert result.status == "failed" and result.migrated == code
    assert not any("wraps its model" in d.message for d in result.diagnostics)
    lines = [n for n, line in enumerate(code.splitlines(), 1) if read in line]
    assert [(d.code, d.line) for d in result.diagnostics] == [("CM900", n) for n in lines]
    for read in result.diagnostics:
        assert "off axis 1 (the batch)" in read.message and "[s, b, h, d]" in read.message
        assert "the sequence on axis 0" in read.message and "will not guess" in read.message


@pytest.mark.parametrize("era", ["4.56", "5"])
def test_a_layer_past_picked_by_an_index_that_is_not_the_layers_position_is_named(era):
    """seqfirst near-miss: the loop runs `self._get_layer(index)`, which returns the layers in reverse, and hands it
    `kv_caches[index]`: whether that is the past of the layer it runs (the position its attention updates in a
    Cache) is not shown, so the file is refused at `kv_caches[index]`, saying so."""
    code = modeling("seqfirst").read_text()
    code = code.replace("return self.layers[layer_number]", "return self.layers[self.num_layers - 1 - layer_number]")
    result = migrate(code, era, "modeling_seqfirst.py")
    assert result.status == "failed" and result.migrated == code
    [indexed] = result.diagnostics
    assert indexed.code == "CM900" and indexed.line == _line(code, "kv_cache=kv_caches[index]")
    assert "does not show that `index` is the position of the layer it runs" in indexed.message
    assert "wraps" not in indexed.message


def _core_attention_as_a_function(code: str) -> str:
    """seqfirst with its attention proper a module-level function instead of a `CoreAttention` module."""
    start, end = code.index("class CoreAttention("), code.index("class SelfAttention(")
    body = code[start:end].split("attention_mask):\n", 1)[1]
    body = textwrap.indent(textwrap.dedent(body), "    ").rstrip().replace("self.norm_factor", "norm_factor")
    function = "def core_attention(query_layer, key_layer, value_layer, attention_mask, norm_factor):\n" + body
    code = code[:start] + function + "\n\n\n" + code[end:]
    code = code.replace(
        "self.core_attention = CoreAttention(config)",
        "self.norm_factor = math.sqrt(self.hidden_size_per_attention_head)",
    )
    return code.replace(
        "self.core_attention(query_layer, key_layer, value_layer, attention_mask)",
        "core_attention(query_layer, key_layer, value_layer, attention_mask, self.norm_factor)",
    )


SEQFIRST_VARIANTS = {
    "core-attention-function": _core_attention_as_a_function,
    "enumerate-layers": lambda code: code.replace(
        "for index in range(self.num_layers):\n            layer = self._get_layer(index)\n",
        "for index, layer in enumerate(self.layers):\n",
    ),
}


@pytest.mark.parametrize("variant", sorted(SEQFIRST_VARIANTS))
def test_sequence_first_variants_migrate_bit_for_bit(variant, tmp_path):
    """seqfirst with its attention proper a module-level function, or its loop `for index, layer in
    enumerate(self.layers)` handing `kv_caches[index]`: migrated in every era; era 4.52's file on the installed
    transformers gives the original's logits and cached [s, b, h, d] tensors (a tuple in gives a tuple out) bit for
    bit, and a DynamicCache passed in comes back as the same object."""
    import torch
    from transformers.cache_utils import DynamicCache

    code = SEQFIRST_VARIANTS[variant](modeling("seqfirst").read_text())
    assert code != modeling("seqfirst").read_text()
    results = {era: migrate(code, era, "modeling_seqfirst.py") for era in MIGRATES}
    assert {era: r.status for era, r in results.items()} == dict.fromkeys(MIGRATES, "migrated")
    for name, text in (("original", code), ("migrated", results["4.52"].migrated)):
        shutil.copytree(REMOTE / "seqfirst", tmp_path / name)
        (tmp_path / name / "modeling_seqfirst.py").write_text(text)
    original, new = _pair(tmp_path / "original", tmp_path / "migrated", "seqfirst")
    ids = torch.randint(3, 99, (2, 6))
    with torch.no_grad():
        old_out, new_out = (m(input_ids=ids[:, :4], use_cache=True) for m in (original, new))
        old_step = original(input_ids=ids[:, 4:5], past_key_values=old_out.past_key_values, use_cache=True)
        new_step = new(input_ids=ids[:, 4:5], past_key_values=new_out.past_key_values, use_cache=True)
        assert torch.equal(old_out.logits, new_out.logits) and torch.equal(old_step.logits, new_step.logits)
        assert isinstance(new_step.past_key_values, tuple) and len(new_step.past_key_values) == 2
        for old_layer, new_layer in zip(old_step.past_key_values, new_step.past_key_values):
            assert new_layer[0].shape[0] == 5  # [s, b, h, d]
            assert all(torch.equal(a, b) for a, b in zip(old_layer, new_layer))
        cache = DynamicCache()
        first = new(input_ids=ids[:, :4], past_key_values=cache, use_cache=True)
        assert first.past_key_values is cache and torch.equal(first.logits, old_out.logits)


def test_a_stacked_past_read_transposed_is_converted_at_the_attention():
    """stacked: the past is read as `layer_past[0].transpose(-2, -1)` and concatenated on -1 (keys [b, h, d, s]):
    the Cache gets the new keys transposed ([b, h, s, d], as the stacked tuples store them), the attention reads its
    own layout back; the base model's tuples are the stored layout, given back stacked."""
    code = modeling("stacked").read_text()
    result = migrate(code, "4.56", "modeling_stacked.py")
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    assert "key, value = layer_past.update(key.transpose(-1, -2), value, self.layer_idx)" in result.migrated
    assert "key = key.transpose(-1, -2).contiguous()" in result.migrated
    assert "presents = past_key_values if use_cache is True else None" in result.migrated
    assert "tuple(torch.stack(layer) for layer in presents.to_legacy_cache())" in result.migrated


@pytest.mark.parametrize(
    "read,blocker",
    [
        # not a view of the stored past: no layout; refused at the concatenation, which it names
        ("layer_past[0].flip(-1), layer_past[1]", "key = torch.cat((past_key, key), dim=-1)"),
        # a permutation: only a swap of two axes (`.transpose(a, b)`) is read as a view of the stored past
        ("layer_past[0].permute(0, 1, 3, 2), layer_past[1]", "key = torch.cat((past_key, key), dim=-1)"),
    ],
)
def test_a_stacked_past_read_another_way_is_refused_at_the_concatenation(read, blocker):
    code = modeling("stacked").read_text().replace("layer_past[0].transpose(-2, -1), layer_past[1]", read)
    result = migrate(code, "4.56", "modeling_stacked.py")
    assert result.status == "failed" and result.migrated == code
    assert not any("concatenates neither" in d.message for d in result.diagnostics)
    [layout] = [d for d in result.diagnostics if d.code == "CM901" and "CM300" in d.message or "CM002" in d.message]
    assert layout.line == _line(code, blocker), str(layout)


def test_presents_added_to_under_another_test_are_refused():
    """stacked near-miss: presents started empty, added to under a test that is not of `use_cache`."""
    code = (
        modeling("stacked")
        .read_text()
        .replace(
            "            if use_cache is True:\n                presents = presents + (present,)",
            "            if present is not None:\n                presents = presents + (present,)",
        )
    )
    result = migrate(code, "4.56", "modeling_stacked.py")
    assert result.status == "failed" and result.migrated == code
    [start] = [d for d in result.diagnostics if "CM016" in d.message or "CM022" in d.message]
    assert "nor as `()` added to only under a test of `use_cache`" in start.message


@pytest.mark.parametrize("era", ["4.56", "portable"])
def test_a_past_hook_is_refused_at_its_parameter(era):
    """pasthook: `prepare_inputs_for_generation(self, input_ids, past=None, ...)` hands `past` on as
    `past_key_values`; generate() passes `past_key_values` since 4.26, so the cache was never reused."""
    code = modeling("pasthook").read_text()
    result = migrate(code, era, "modeling_pasthook.py")
    assert result.status == "failed" and result.migrated == code
    [hook] = result.diagnostics
    assert hook.code == "CM900" and hook.line == _line(
        code, "def prepare_inputs_for_generation(self, input_ids, past="
    )
    assert "4.26" in hook.message and "never reuses the cache" in hook.message


def test_a_past_hook_that_forwards_its_kwargs_is_not_one():
    """A hook taking `past` but letting `past_key_values` through **kwargs (idefics 4.35.2) uses the cache."""
    code = (
        modeling("pasthook")
        .read_text()
        .replace('"past_key_values": past,', '"past_key_values": kwargs.get("past_key_values", past),')
    )
    result = migrate(code, "4.56", "modeling_pasthook.py")
    assert not any("4.26" in d.message for d in result.diagnostics)


@pytest.mark.parametrize("era", ["4.56", "5", "portable"])
def test_a_past_length_off_the_sequence_axis_is_named(era):
    """bshd near-miss: the past length read off axis 2 ([b, s, h, d]: the heads)."""
    code = (
        modeling("bshd")
        .read_text()
        .replace(
            "past_key_values_length = past_key_values[0][0].shape[1]",
            "past_key_values_length = past_key_values[0][0].shape[2]",
        )
    )
    result = migrate(code, era, "modeling_bshd.py")
    assert result.status == "failed" and result.migrated == code
    [read] = result.diagnostics
    assert read.code == "CM900" and read.line == _line(code, "past_key_values_length = past_key_values[0][0].shape[2]")
    assert "axis 2 (the heads)" in read.message and "[b, s, h, d]" in read.message and "axis 1" in read.message


@pytest.mark.parametrize("era", ["4.56", "5", "portable"])
def test_a_key_whose_rank_the_code_does_not_show_is_refused_at_its_concatenation(era):
    """bshd near-miss: the key comes out of a helper (no `.view(b, s, h, d)`), so where its axes go when the
    sequence moves to -2 is not known: refused at the key's concatenation, naming the tensor."""
    code = (
        modeling("bshd")
        .read_text()
        .replace("key_states = k.view(bsz, q_len, self.num_heads, self.head_dim)", "key_states = self._split_heads(k)")
    )
    result = migrate(code, era, "modeling_bshd.py")
    assert result.status == "failed" and result.migrated == code
    [layout] = [d for d in result.diagnostics if d.code == "CM901"]
    assert layout.line == _line(code, "key_states = torch.cat([past_key_value[0], key_states], dim=1)")
    assert "the rank of `key_states` is not known" in layout.message


@pytest.mark.parametrize("era", ["4.56", "5", "portable"])
@pytest.mark.parametrize(
    "old, new, reason",
    [
        (  # the heads axis of [b, h, s, 2d]
            "key_value = torch.cat((layer_past, key_value), dim=-2)",
            "key_value = torch.cat((layer_past, key_value), dim=1)",
            "only a sequence axis -2 is known",
        ),
        (  # halves taken by slicing: not shown to be the two equal halves the Cache would hold
            "key, value = key_value.split((self.head_dim, self.head_dim), dim=-1)",
            "key, value = key_value[..., : self.head_dim], key_value[..., self.head_dim :]",
            "is never split into two equal halves on its last axis",
        ),
    ],
)
def test_a_fused_past_in_no_known_layout_is_refused_at_its_concatenation(era, old, new, reason):
    """fusedlist near-misses: a fused past concatenated off its sequence axis, or never split in halves on its last
    axis, has no layout a Cache can hold: refused at the concatenation, saying why, in every era."""
    code = modeling("fusedlist").read_text()
    assert old in code
    code = code.replace(old, new)
    result = migrate(code, era, "modeling_fusedlist.py")
    assert result.status == "failed" and result.migrated == code
    [layout] = [d for d in result.diagnostics if d.code == "CM901"]
    assert layout.line == _line(code, "key_value = torch.cat((layer_past, key_value), dim=")
    assert reason in layout.message


def test_an_einops_pattern_with_an_ellipsis_gives_no_rank():
    """einops near-miss: patterns with `...` fix no rank (and nothing else does here), so `dim=2` of the
    concatenation cannot be told from a negative axis: refused at that concatenation."""
    code = (
        modeling("einops")
        .read_text()
        .replace(
            '"b s (h d) -> b h s d", h=self.num_heads)', '"... (h d) -> ... h d", h=self.num_heads).transpose(-3, -2)'
        )
    )
    result = migrate(code, "4.56", "modeling_einops.py")
    assert result.status == "failed" and result.migrated == code
    [rank] = [d for d in result.diagnostics if d.code == "CM901"]
    assert "the rank of `k` is not known" in rank.message
    assert rank.line == _line(code, "k = torch.cat((past_key, k), dim=2)")


def test_a_merged_key_not_built_by_a_reshape_is_refused():
    """merged near-miss: a 3-axis key whose merged batch x heads axis the code does not show."""
    code = (
        modeling("merged")
        .read_text()
        .replace(
            "key_layer = key_layer.transpose(1, 2).reshape(batch_size * self.num_heads, q_length, self.head_dim)",
            "key_layer = key_layer.transpose(1, 2).flatten(0, 1)",
        )
    )
    result = migrate(code, "4.56", "modeling_merged.py")
    assert result.status == "failed" and result.migrated == code
    assert any("`key_layer` has 3 axes" in d.message for d in result.diagnostics), [str(d) for d in result.diagnostics]


def test_einops_and_einsum_patterns_give_ranks():
    import libcst as cst

    from cachemigrate.views.ranks import RankScope

    scope = RankScope()
    assert scope.rank(cst.parse_expression('rearrange(x, "b s (h d) -> b h s d", h=4)')) == 4
    assert scope.rank(cst.parse_expression('einops.rearrange(x, "b h s d -> b s (h d)")')) == 3
    assert scope.rank(cst.parse_expression('repeat(x, "b s d -> b (r s) d", r=2)')) == 3
    assert scope.rank(cst.parse_expression('rearrange(x, "... (h d) -> ... h d", h=4)')) is None
    assert scope.rank(cst.parse_expression("rearrange(x, pattern, h=4)")) is None
    assert scope.rank(cst.parse_expression('torch.einsum("bhqd,bhkd->bhqk", q, k)')) == 4
    assert scope.rank(cst.parse_expression('torch.einsum("bhqk, bhkd -> bhqd", a, v)')) == 4


def test_layers_handed_the_past_under_unknown_names_are_said_so():
    """seqfirst with its caches named `layer_cache`/`layer_caches` (no cache name): the file defines its own stack,
    so the diagnostic says the names are the blocker, never that it wraps a library model."""
    code = modeling("seqfirst").read_text().replace("kv_caches", "layer_caches").replace("kv_cache", "layer_cache")
    result = migrate(code, "4.56", "modeling_seqfirst.py")
    assert result.status == "failed" and result.migrated == code
    [diagnostic] = result.diagnostics
    assert diagnostic.code == "CM903" and "wraps" not in diagnostic.message
    assert "GLMTransformer holds a list of GLMBlock" in diagnostic.message and "cache_names" in diagnostic.message


def test_a_loop_over_a_reordered_past_is_refused_at_the_loop():
    """zipped near-miss: the layers zipped with the past reversed (`past_key_values[::-1]`) is no per-layer past."""
    code = (
        modeling("zipped")
        .read_text()
        .replace(
            "enumerate(zip(self.layers, past_key_values)):", "enumerate(zip(self.layers, past_key_values[::-1])):"
        )
    )
    result = migrate(code, "4.56", "modeling_zipped.py")
    assert result.status == "failed" and result.migrated == code
    [loop] = result.diagnostics
    assert loop.code == "CM900" and loop.line == _line(code, "past_key_values[::-1])):")
    assert "`past_key_values[::-1]`" in loop.message


# -- diagnostics that said something false (issue 17, item 7) ---------------------------------------------------


def _merged_in_the_model(heads: str) -> str:
    """merged without its converters: the model takes and gives back [b*h, s, d] tuples, so the migrated model
    must split batch and heads itself, with the attention's `self.num_heads` set as ``heads``."""
    code = modeling("merged").read_text()
    for line in (
        "        else:\n            past_key_values = self._convert_to_rw_cache(past_key_values)\n",
        "        if presents is not None:\n            presents = self._convert_to_standard_cache(presents, batch_size)\n",
    ):
        assert line in code
        code = code.replace(line, "")
    return code.replace("        self.num_heads = config.num_attention_heads\n", heads, 1)


MULTI_QUERY = (
    "        self.multi_query = config.multi_query\n"
    "        self.num_heads = config.num_attention_heads if not self.multi_query else 1\n"
)


def test_heads_set_from_the_config_through_a_conditional_expression_migrate_bit_for_bit(tmp_path):
    """`self.num_heads = config.num_attention_heads if not self.multi_query else 1`, `self.multi_query` set from
    the config: the model splits the heads with `self.config.num_attention_heads if not self.config.multi_query
    else 1` (it was said 'not set from the config'); era 4.52's file gives the original's logits and [b*h, s, d]
    cached tensors bit for bit, a tuple in gives a tuple out."""
    import torch

    code = _merged_in_the_model(MULTI_QUERY)
    result = migrate(code, "4.52", "modeling_merged.py")
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    assert "(-1, self.config.num_attention_heads if not self.config.multi_query else 1)" in result.migrated
    for era in ("4.56", "5", "portable"):
        assert migrate(code, era, "modeling_merged.py").status == "migrated"
    models = []
    for name, text in (("original", code), ("migrated", result.migrated)):
        shutil.copytree(REMOTE / "merged", tmp_path / name)
        (tmp_path / name / "modeling_merged.py").write_text(text)
        _, config_class, head = _load(tmp_path / name, "merged")
        torch.manual_seed(0)
        models.append(head(config_class(multi_query=False)).eval())
    original, new = models
    new.load_state_dict(original.state_dict())
    ids = torch.randint(3, 99, (2, 6))
    with torch.no_grad():
        old_out, new_out = (m(input_ids=ids[:, :4], use_cache=True) for m in (original, new))
        old_step = original(input_ids=ids[:, 4:5], past_key_values=old_out.past_key_values, use_cache=True)
        new_step = new(input_ids=ids[:, 4:5], past_key_values=new_out.past_key_values, use_cache=True)
    assert torch.equal(old_out.logits, new_out.logits) and torch.equal(old_step.logits, new_step.logits)
    assert isinstance(new_step.past_key_values, tuple)
    for old_layer, new_layer in zip(old_step.past_key_values, new_step.past_key_values):
        assert new_layer[0].dim() == 3 and all(torch.equal(a, b) for a, b in zip(old_layer, new_layer))


def test_heads_set_from_a_call_are_named_with_what_is_not_read_off_the_config():
    """`self.num_heads = heads_of(config)`: the reason names the call, not 'not set from the config'."""
    code = _merged_in_the_model("        self.num_heads = heads_of(config)\n")
    result = migrate(code, "4.56", "modeling_merged.py")
    assert result.status == "failed" and result.migrated == code
    [layout] = [d for d in result.diagnostics if d.code == "CM901"]
    assert "`self.num_heads` is set from `heads_of(config)`, and `heads_of(config)` is not read off the config" in (
        layout.message
    )
    assert "not set from the config" not in layout.message


def test_a_file_stacking_its_own_layers_is_never_said_to_wrap_a_model():
    """seqfirst with unknown cache names and its PreTrainedModel class imported from another module: attention,
    blocks and model are in the file, so it wraps no library model (it was said to); the names are the blocker."""
    code = modeling("seqfirst").read_text().replace("kv_caches", "layer_caches").replace("kv_cache", "layer_cache")
    start, end = code.index("class SeqFirstPreTrainedModel("), code.index("class SeqFirstModel(")
    code = code[:start] + code[end:]
    config = "from .configuration_seqfirst import SeqFirstConfig\n"
    code = code.replace(config, config + "from .pretrained_seqfirst import SeqFirstPreTrainedModel\n")
    for era in MIGRATES:
        result = migrate(code, era, "modeling_seqfirst.py")
        assert result.status == "failed" and result.migrated == code
        [diagnostic] = result.diagnostics
        assert diagnostic.code == "CM903" and "wraps" not in diagnostic.message
        assert "GLMTransformer holds a list of GLMBlock" in diagnostic.message
