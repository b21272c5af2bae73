"""Package mode on the command line: a folder, or one file of it, migrated as one package and written all or
none (a read-only module, a write that fails: the modules already written get their bytes back); which modules make
a unit; and the probe on package folders. The fixtures and helpers are those of ``tests/test_packages.py``."""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_packages import PACKAGES, STYLES, migrate, migrated_copy, ruleset

from cachemigrate.cli.main import main
from cachemigrate.cli.package import migrate_unit, write_unit
from cachemigrate.engine import Options


def _project(tmp_path: Path, style: str) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.black]\nline-length = 119\n")
    shutil.copytree(PACKAGES / style, tmp_path / style)
    return tmp_path / style


def _texts(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.glob("*.py"))}


@pytest.mark.parametrize("style", STYLES)
def test_a_single_file_named_is_migrated_with_its_siblings_with_a_notice(style, tmp_path):
    folder = _project(tmp_path, style)
    result = CliRunner().invoke(main, ["migrate", "--era", "5", str(folder / "attention.py")])
    assert result.exit_code == 0, result.output
    expected = {name: r.migrated for name, r in migrate(style, "5").items()}
    assert _texts(folder) == expected
    notes = [line for line in result.output.splitlines() if "CM921" in line]
    expected_note = (
        f"{folder / 'attention.py'}:1:1: CM921 the model of attention.py spans its sibling modules (blocks.py, "
        f"modeling_{style}.py), which import one another: they were analysed and migrated with it as one package "
        "(all of them or none)"
    )
    assert notes == [expected_note]


def test_the_folder_is_migrated_as_one_package(tmp_path):
    folder = _project(tmp_path, "relative")
    result = CliRunner().invoke(main, ["migrate", "--era", "portable", str(folder)])
    assert result.exit_code == 0, result.output
    assert _texts(folder) == {name: r.migrated for name, r in migrate("relative", "portable").items()}


def test_a_read_only_module_leaves_the_whole_package_unchanged(tmp_path):
    folder = _project(tmp_path, "relative")
    before = _texts(folder)
    blocks = folder / "blocks.py"
    blocks.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    result = CliRunner().invoke(main, ["migrate", "--era", "5", str(folder / "modeling_relative.py")])
    assert result.exit_code == 1
    assert _texts(folder) == before
    assert f"{blocks}:1:1: CM905 the file is read-only" in result.output
    assert "could not be written, and a package is migrated all or none" in result.output


def test_a_write_that_fails_rolls_back_the_modules_already_written(tmp_path):
    """The second write fails (a full disk): the first module written gets its original bytes back, and every
    module of the package is reported unchanged."""
    from cachemigrate.source.writing import write_atomically

    folder = _project(tmp_path, "relative")
    before = {p.name: p.read_bytes() for p in folder.glob("*.py")}
    unit = sorted(folder.glob("*.py"))
    results = migrate_unit(unit, {p.resolve() for p in unit}, ruleset("5"), Options(line_length=119))
    assert sum(r.changed for r in results) == 3
    calls = []

    def write(path, data):
        calls.append(Path(path).name)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        write_atomically(path, data)

    out, written = write_unit(results, write)
    assert written == 0 and calls == ["attention.py", "blocks.py"]
    assert {p.name: p.read_bytes() for p in folder.glob("*.py")} == before
    by_name = {Path(r.path).name: r for r in out}
    assert [d.code for d in by_name["blocks.py"].diagnostics] == ["CM906"]
    assert "No space left on device" in by_name["blocks.py"].diagnostics[0].message
    assert "(attention.py written, then restored)" in by_name["attention.py"].diagnostics[0].message
    assert {r.status for r in out if r.changed or r.original != r.migrated} <= {"failed"}
    assert all(r.status == "failed" for name, r in by_name.items() if name != "configuration_relative.py")


@pytest.mark.parametrize("style", STYLES)
def test_the_probe_takes_the_folders_and_imports_each_as_a_package(style, tmp_path):
    """`cachemigrate probe ORIGINAL_FOLDER MIGRATED_FOLDER` on 4.51.3 (era portable): each folder's modeling module
    is imported inside the folder's own package with its siblings (the absolute style by their bare names, unbound
    afterwards), and no check diverges (the fixtures return no attentions or hidden states: set-up errors)."""
    import sys

    folder = migrated_copy(style, "portable", tmp_path)
    result = CliRunner().invoke(main, ["probe", str(PACKAGES / style), str(folder)])
    assert result.exit_code in (0, 2), result.output  # 1: a check diverged
    rows = {line.split()[0]: line.split()[1] for line in result.output.splitlines() if line.split()[1:2]}
    for check in ("tuple_in_tuple_out", "dynamic_cache_in_same_object", "generate_greedy", "generate_beam"):
        assert rows[check] == "pass", result.output
    assert " 0 diverged" in result.output
    assert not {"attention", "blocks", f"configuration_{style}"} & set(sys.modules)


def test_an_unreadable_module_leaves_the_package_unchanged_and_says_which(tmp_path):
    folder = _project(tmp_path, "relative")
    (folder / "blocks.py").write_bytes(b"\xff\xfe\x00not python")
    unit = sorted(folder.glob("*.py"))
    results = {Path(r.path).name: r for r in migrate_unit(unit, set(), ruleset("5"), Options(line_length=119))}
    assert {r.status for r in results.values()} == {"failed"} and not any(r.changed for r in results.values())
    assert [d.code for d in results["blocks.py"].diagnostics] == ["CM904"]
    assert (
        "blocks.py, a module of the same package, could not be read" in results["attention.py"].diagnostics[0].message
    )


def test_which_modules_make_a_unit(tmp_path):
    """A module that takes a cache and builds a module of a sibling's class taking one links the two; a subclass of
    a sibling's model, a wrapper that takes no cache and the configuration link nothing (each file stays alone)."""
    from cachemigrate.rules.eras import cache_names
    from cachemigrate.source.units import package_units

    shutil.copytree(PACKAGES / "relative", tmp_path / "pkg")
    folder = tmp_path / "pkg"
    (folder / "modeling_child.py").write_text(
        "from .modeling_relative import RelativeForCausalLM\n\n\n"
        "class Child(RelativeForCausalLM):\n    def forward(self, input_ids, past_key_values=None):\n"
        "        return super().forward(input_ids, past_key_values=past_key_values)\n"
    )
    (folder / "modeling_wrapper.py").write_text(
        "from .modeling_relative import RelativeForCausalLM\n\n\n"
        "class Wrapper:\n    def __init__(self, config):\n        self.model = RelativeForCausalLM(config)\n"
    )
    files = [folder / name for name in ("modeling_relative.py", "modeling_child.py", "modeling_wrapper.py")]
    units, alone = package_units(files, cache_names("5"))
    assert [[p.name for p in unit] for unit in units] == [["attention.py", "blocks.py", "modeling_relative.py"]]
    assert [p.name for p in alone] == ["modeling_child.py", "modeling_wrapper.py"]
    assert package_units([PACKAGES.parent / "remote" / "bshd" / "modeling_bshd.py"], cache_names("5"))[0] == []
