"""Package mode: the attention, the blocks and the model in three sibling modules of a remote-code folder
(``fixtures/packages/relative``: ``from .attention import ...``; ``fixtures/packages/absolute``: ``from attention
import SelfAttention as Attention``, as a folder on the path imports), analysed together and migrated all or none.

Each module alone is CM903 (its model, or its attention, is in a sibling); the package migrates for every era,
gives the original's tensors bit for bit on the installed transformers (4.51.3), passes the cross-version probe
on 4.57.6 and the newest 5.x (tests marked ``runtimes``). The near-misses (an import cycle, a block whose
attention comes from outside the package, a class defined twice) are refused at the import or class; a module the
rules cannot migrate leaves them all unchanged. The command line is ``tests/test_packages_cli.py``."""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.package_engine import migrate_package
from cachemigrate.rules.loader import load_ruleset

PACKAGES = Path(__file__).resolve().parent.parent / "fixtures" / "packages"
STYLES = ["relative", "absolute"]
TF4576_PYTHON = Path(os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"))
TF5_PYTHON = Path(os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"))


@functools.cache
def ruleset(era: str):
    return load_ruleset(era)


def sources(style: str, **changes: tuple[str, str]) -> dict[str, str]:
    """The package's modules (path -> text), with ``name=(old, new)`` replaced in a module."""
    found = {str(p): p.read_text() for p in sorted((PACKAGES / style).glob("*.py"))}
    for name, (old, new) in changes.items():
        path = str(PACKAGES / style / f"{name}.py")
        assert old in found[path]
        found[path] = found[path].replace(old, new)
    return found


def migrate(style: str, era: str, **changes):
    return {
        Path(r.path).name: r
        for r in migrate_package(sources(style, **changes), ruleset(era), Options(line_length=119))
    }


def migrated_copy(style: str, era: str, folder: Path) -> Path:
    results = migrate(style, era)
    assert {r.status for r in results.values()} == {"migrated", "clean"}, [
        str(d) for r in results.values() for d in r.diagnostics
    ]
    shutil.copytree(PACKAGES / style, folder / style)
    for name, result in results.items():
        (folder / style / name).write_text(result.migrated)
    return folder / style


def _head(folder: Path, style: str):
    from cachemigrate.probe.loading import load_modeling_module

    module = load_modeling_module(folder / f"modeling_{style}.py")
    config = next(v for k, v in vars(module).items() if k.endswith("Config") and isinstance(v, type))
    head = next(v for k, v in vars(module).items() if k.endswith("ForCausalLM"))
    return config, head


# -- the fixtures run -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("style", STYLES)
def test_each_package_runs_and_its_cache_agrees_with_no_cache(style):
    import torch

    config, head = _head(PACKAGES / style, style)
    torch.manual_seed(0)
    model = head(config()).eval()
    ids = torch.randint(3, 99, (2, 7))
    with torch.no_grad():
        full = model(input_ids=ids, use_cache=False).logits
        out = model(input_ids=ids[:, :5], use_cache=True)
        steps = [out.logits]
        for i in (5, 6):
            out = model(input_ids=ids[:, i : i + 1], past_key_values=out.past_key_values, use_cache=True)
            steps.append(out.logits)
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)


# -- one module alone cannot be migrated; the package can ------------------------------------------------------


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("name", ["attention.py", "modeling_{}.py"])
def test_a_module_alone_is_cm903(style, name):
    """The attention has no model to give it its layer index; the model's blocks and attention are elsewhere (the
    block in between, which only hands the cache on, is clean alone)."""
    name = name.format(style)
    code = (PACKAGES / style / name).read_text()
    result = migrate_source(code, ruleset("5"), Options(line_length=119), path=name)
    assert result.status == "failed" and [d.code for d in result.diagnostics] == ["CM903"]


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("era", ["4.52", "4.56", "5", "portable"])
def test_the_package_migrates_for_every_era_and_again_is_clean(style, era):
    results = migrate(style, era)
    statuses = {name: r.status for name, r in results.items()}
    assert statuses == {
        "attention.py": "migrated",
        "blocks.py": "migrated",
        f"modeling_{style}.py": "migrated",
        f"configuration_{style}.py": "clean",
    }, [str(d) for r in results.values() for d in r.diagnostics]
    assert not [d for r in results.values() for d in r.diagnostics if d.code == "CM903"]
    # the layer index reaches the attention through the block, whatever name the block imports it under
    assert "self.attn = " in results["blocks.py"].migrated and "layer_idx=layer_idx)" in results["blocks.py"].migrated
    # the imports a rule needs land in the module whose code it changed
    assert "DynamicCache" in results[f"modeling_{style}.py"].migrated
    assert "DynamicCache" not in results["attention.py"].migrated
    again = migrate_package({str(PACKAGES / style / n): r.migrated for n, r in results.items()}, ruleset(era))
    assert {r.status for r in again} == {"clean"}


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("era", ["4.56", "portable"])
def test_the_migrated_package_gives_the_originals_tensors_bit_for_bit(style, era, tmp_path):
    """On 4.51.3: tuple in -> tuple out, the logits and every cached tensor equal (torch.equal), a DynamicCache
    passed in is the one handed back, and greedy generation gives the same tokens."""
    import torch
    from transformers.cache_utils import DynamicCache

    config, head = _head(PACKAGES / style, style)
    _, new_head = _head(migrated_copy(style, era, tmp_path), style)
    torch.manual_seed(0)
    original = head(config()).eval()
    new = new_head(config()).eval()
    new.load_state_dict(original.state_dict())
    ids = torch.randint(3, 99, (2, 6))
    with torch.no_grad():
        old_out = original(input_ids=ids[:, :4], use_cache=True)
        new_out = new(input_ids=ids[:, :4], use_cache=True)
        assert torch.equal(old_out.logits, new_out.logits)
        assert type(new_out.past_key_values) is type(old_out.past_key_values) is tuple
        old_step = original(input_ids=ids[:, 4:5], past_key_values=old_out.past_key_values, use_cache=True)
        new_step = new(input_ids=ids[:, 4:5], past_key_values=new_out.past_key_values, use_cache=True)
        assert torch.equal(old_step.logits, new_step.logits)
        assert len(old_step.past_key_values) == len(new_step.past_key_values)
        for old_layer, new_layer in zip(old_step.past_key_values, new_step.past_key_values):
            assert all(torch.equal(a, b) for a, b in zip(old_layer, new_layer))
        cache = DynamicCache()
        first = new(input_ids=ids[:, :4], past_key_values=cache, use_cache=True)
        assert first.past_key_values is cache and torch.equal(first.logits, old_out.logits)
        prompt = ids[:, :3]
        assert torch.equal(
            original.generate(prompt, max_new_tokens=4, do_sample=False),
            new.generate(prompt, max_new_tokens=4, do_sample=False),
        )


@pytest.mark.runtimes
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize(
    "era,python", [("4.56", TF4576_PYTHON), ("portable", TF4576_PYTHON), ("5", TF5_PYTHON), ("portable", TF5_PYTHON)]
)
def test_the_cross_version_probe_passes(style, era, python, tmp_path):
    """The original package on 4.51.3, the migrated one on 4.57.6 or the newest 5.x, each imported as a package
    (the absolute one with its bare sibling imports): no check diverges and the largest difference is 0."""
    if not python.is_file():
        pytest.skip(f"no interpreter at {python}")
    from cachemigrate.probe.cross import run_cross_probe
    from cachemigrate.probe.report import PASS, SKIP

    folder = migrated_copy(style, era, tmp_path)
    name = f"modeling_{style}.py"
    report = run_cross_probe(PACKAGES / style / name, folder / name, migrated_python=str(python), timeout=300)
    statuses = {r.name: r.status for r in report.results}
    assert set(statuses.values()) <= {PASS, SKIP}, [(r.name, r.status, r.detail) for r in report.results]
    for check in ("tuple_in_tuple_out", "cache_in_same_cache", "generate_greedy", "generate_beam"):
        assert statuses[check] == PASS, (check, statuses)
    assert report.max_abs_diff == 0.0, report.header()


# -- near-misses: refused at the import that causes it -----------------------------------------------------------


def _line(code: str, text: str) -> int:
    [line] = [n for n, row in enumerate(code.splitlines(), 1) if row.startswith(text)]
    return line


def _refusal(results):
    assert {r.status for r in results.values()} == {"failed"}
    assert all(r.migrated == r.original for r in results.values())
    blamed = [d for r in results.values() for d in r.diagnostics if "left unchanged with its package" not in d.message]
    [diagnostic] = blamed
    others = [d for r in results.values() for d in r.diagnostics if d is not diagnostic]
    assert len(others) == len(results) - 1 and all(d.code == "CM920" for d in others)
    return diagnostic


SIBLING = {"relative": "from .{} import", "absolute": "from {} import"}  # how each style imports a sibling


@pytest.mark.parametrize("style", STYLES)
def test_an_import_cycle_is_refused_at_the_import_that_closes_it(style):
    """blocks.py imports the modeling module, which imports blocks.py: refused at the modeling module's import,
    naming both imports with their lines."""
    importing = SIBLING[style].format(f"modeling_{style}")
    old = "from torch import nn\n"
    results = migrate(style, "5", blocks=(old, f"{old}\n{importing} {style.capitalize()}PreTrainedModel\n"))
    diagnostic = _refusal(results)
    modeling = results[f"modeling_{style}.py"]
    assert Path(diagnostic.path).name == f"modeling_{style}.py"
    assert diagnostic.line == _line(modeling.original, SIBLING[style].format("blocks"))
    assert diagnostic.code == "CM920" and "import each other in a cycle" in diagnostic.message
    blocks_line = _line(results["blocks.py"].original, importing)
    assert f"blocks.py:{blocks_line} imports modeling_{style}" in diagnostic.message
    assert f"modeling_{style}.py:{diagnostic.line} imports blocks" in diagnostic.message


@pytest.mark.parametrize("style", STYLES)
def test_a_block_whose_attention_comes_from_outside_the_package_is_refused_naming_it(style):
    """The block imports its attention from `mylib.layers` (the package's own attention.py stays): refused at that
    import, saying which module of the block hands the cache to what, and from where it comes."""
    old = SIBLING[style].format("attention")
    results = migrate(style, "5", blocks=(old, "from mylib.layers import"))
    diagnostic = _refusal(results)
    assert Path(diagnostic.path).name == "blocks.py"
    assert diagnostic.line == _line(results["blocks.py"].original, "from mylib.layers import")
    assert diagnostic.code == "CM920"
    assert "DecoderBlock hands its cache to `self.attn`" in diagnostic.message
    assert "imports from `mylib.layers`, outside the package" in diagnostic.message


def test_a_sibling_module_imported_whole_is_resolved_through_its_name():
    """`import blocks` then `blocks.DecoderBlock(config)`: the stack is found, and the block gets its layer index."""
    code = sources("absolute", modeling_absolute=("from blocks import DecoderBlock\n", "import blocks\n"))
    path = str(PACKAGES / "absolute" / "modeling_absolute.py")
    code[path] = code[path].replace("[DecoderBlock(config)", "[blocks.DecoderBlock(config)")
    found = {Path(r.path).name: r for r in migrate_package(code, ruleset("5"), Options(line_length=119))}
    assert found["modeling_absolute.py"].status == "migrated", [str(d) for r in found.values() for d in r.diagnostics]
    assert "blocks.DecoderBlock(config, layer_idx=layer_idx)" in found["modeling_absolute.py"].migrated


@pytest.mark.parametrize("style", STYLES)
def test_a_module_the_rules_cannot_migrate_leaves_the_whole_package_unchanged(style):
    """The attention reads its past through `.flip(-1)` (no rule can tell its layout): refused at its lines of
    attention.py, and the model's past-length read at its line of the model's module, as the engine says them for
    one file; the block, which the rules could have migrated, is left unchanged too, saying why."""
    old = "key = torch.cat((past_key, key), dim=-2)"
    new = "key = torch.cat((past_key.flip(-1), key), dim=-2)"
    results = migrate(style, "5", attention=(old, new))
    assert {r.status for r in results.values()} == {"failed"}
    assert all(r.migrated == r.original for r in results.values())
    attention, modeling = results["attention.py"], results[f"modeling_{style}.py"]
    assert [(d.code, d.line) for d in attention.diagnostics] == [
        ("CM900", _line(attention.original, "            past_key, past_value = layer_past")),
        ("CM901", _line(attention.original, "            " + new)),
    ]
    read = "            past_length = past_key_values[0][0].size(-2)"
    assert [(d.code, d.line) for d in modeling.diagnostics] == [("CM900", _line(modeling.original, read))]
    [note] = results["blocks.py"].diagnostics
    assert note.code == "CM920" and note.message.startswith("left unchanged with its package")
    assert f"attention.py:{attention.diagnostics[0].line} could not be migrated (CM900)" in note.message


def test_a_module_marked_skip_leaves_the_package_as_it_is():
    results = migrate(
        "relative", "5", blocks=("from torch import nn\n", "# cachemigrate: skip\nfrom torch import nn\n")
    )
    assert {r.status for r in results.values()} == {"skipped"} and not any(r.changed for r in results.values())
    assert results["blocks.py"].diagnostics == []
    assert "blocks.py, a module of the same package, is marked" in results["attention.py"].diagnostics[0].message


def test_a_class_defined_in_two_modules_is_refused_at_the_second():
    results = migrate(
        "relative",
        "5",
        attention=("\n\nclass SelfAttention(", "\n\nclass DecoderBlock:\n    pass\n\n\nclass SelfAttention("),
    )
    diagnostic = _refusal(results)
    blocks = results["blocks.py"]
    assert (Path(diagnostic.path).name, diagnostic.line) == (
        "blocks.py",
        _line(blocks.original, "class DecoderBlock("),
    )
    assert diagnostic.code == "CM920"
    assert diagnostic.message.startswith("class DecoderBlock is defined in attention.py and again in blocks.py")


def test_a_statement_marked_skip_that_the_package_needs_is_said_at_its_line():
    old = "            key = torch.cat((past_key, key), dim=-2)\n"
    results = migrate("relative", "5", attention=(old, old.rstrip("\n") + "  # cachemigrate: skip\n"))
    assert {r.status for r in results.values()} == {"failed"}
    attention = results["attention.py"]
    assert ("CM907", _line(attention.original, old.rstrip("\n"))) in {(d.code, d.line) for d in attention.diagnostics}


def test_a_function_taking_a_cache_defined_in_two_modules_is_refused_at_the_second():
    helper = "def past_length(past_key_values):\n    return past_key_values[0][0].size(-2)\n\n\n"
    results = migrate(
        "relative",
        "5",
        attention=("class SelfAttention(", helper + "class SelfAttention("),
        blocks=("class DecoderBlock(", helper + "class DecoderBlock("),
    )
    diagnostic = _refusal(results)
    blocks = results["blocks.py"]
    assert (Path(diagnostic.path).name, diagnostic.line) == ("blocks.py", _line(blocks.original, "def past_length("))
    assert diagnostic.message.startswith("function past_length is defined in attention.py and again in blocks.py")
