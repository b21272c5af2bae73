"""A stack whose forward is bound under another name, or split into a helper (issue 18): ``def decode(self, ...)``
holding the loop over the layers and ``forward = decode`` in the class body; or a ``forward`` that only returns
``self._run_layers(...)`` handing on every parameter. The method (the helper) is the class's forward for the roles
and for every rule that applies to ``forward`` (``facts/analysis.py``, ``rules/holes.py``); a delegating forward is
left as it is. Built here from the remote-code style fixture ``zipped``, each migrates in every era, agrees with the
original on 4.51.3 (same-process probe), and passes the cross-version probe bit for bit on 4.57.6 / 5.25.0."""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.engine import Options, migrate_source
from cachemigrate.facts.analysis import analyze
from cachemigrate.rules.loader import load_ruleset

ZIPPED = Path(__file__).resolve().parent.parent / "fixtures" / "remote" / "zipped"
RUNTIMES = {
    "4.56": os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"),
    "5": os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"),
}


@functools.cache
def ruleset(era: str):
    return load_ruleset(era)


def bound_variant() -> str:
    """The zipped fixture with ``ZippedModel.forward`` renamed ``decode`` and bound as ``forward = decode``."""
    return bound_variant_of((ZIPPED / "modeling_zipped.py").read_text())


def _folder(tmp_path: Path, name: str, code: str) -> Path:
    shutil.copytree(ZIPPED, tmp_path / name)
    (tmp_path / name / "modeling_zipped.py").write_text(code)
    return tmp_path / name / "modeling_zipped.py"


def migrate(code: str, era: str):
    return migrate_source(code, ruleset(era), Options(line_length=119), path="modeling_zipped.py")


def test_the_bound_method_is_the_forward_of_the_base_model():
    info = analyze(cst.parse_module(bound_variant()), ruleset("4.52").era.cache_names)
    assert info.classes["ZippedModel"].methods["forward"] is info.classes["ZippedModel"].methods["decode"]
    assert info.roles["base_model"] == ["ZippedModel"]


@pytest.mark.parametrize("era", ["4.52", "4.56", "5", "portable"])
def test_the_bound_forward_migrates_in_every_era_as_the_forward_does(era):
    code = bound_variant()
    result = migrate(code, era)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    plain = migrate((ZIPPED / "modeling_zipped.py").read_text(), era).migrated
    assert result.migrated == bound_variant_of(plain)


def bound_variant_of(code: str) -> str:
    """What binding the forward under another name does to a migrated file: the same rename and binding."""
    start = code.index("class ZippedModel(")
    at = code.index("    def forward(", start)
    code = code[:at] + "    def decode(" + code[at + len("    def forward(") :]
    head = code.index("class ZippedForCausalLM(")
    bound = "\n\n    forward = decode  # the stack's forward, bound under another name\n\n\n"
    return code[:head].rstrip("\n") + bound + code[head:]


def test_on_4_51_3_the_same_version_probe_finds_no_difference(tmp_path):
    from cachemigrate.probe import run_probe

    original = _folder(tmp_path, "original", bound_variant())
    migrated = _folder(tmp_path, "migrated", migrate(bound_variant(), "4.52").migrated)
    results = run_probe(original, migrated)
    assert {r.status for r in results} <= {"pass", "skip", "setup-error"}, [(r.name, r.status) for r in results]
    passed = {r.name for r in results if r.status == "pass"}
    assert {"tuple_cache_stepwise", "dynamic_cache_in_same_object", "generate_greedy", "generate_beam"} <= passed


@pytest.mark.runtimes
@pytest.mark.parametrize("era", ["4.56", "5"])
def test_the_cross_version_probe_passes_bit_for_bit(era, tmp_path):
    from cachemigrate.probe.cross import run_cross_probe
    from cachemigrate.probe.report import PASS, SKIP

    python = Path(RUNTIMES[era])
    if not python.is_file():
        pytest.skip(f"no interpreter at {python}")
    original = _folder(tmp_path, "original", bound_variant())
    migrated = _folder(tmp_path, "migrated", migrate(bound_variant(), era).migrated)
    report = run_cross_probe(original, migrated, migrated_python=str(python), timeout=300)
    assert {r.status for r in report.results} <= {PASS, SKIP}, [(r.name, r.status, r.detail) for r in report.results]
    assert report.max_abs_diff == 0.0, report.header()


# -- a forward split into a helper ------------------------------------------------------------------------------


def split_variant_of(code: str) -> str:
    """``ZippedModel.forward`` made a delegate: it returns ``self._run_layers(...)``, which holds the old body."""
    start = code.index("class ZippedModel(")
    at = code.index("    def forward(", start)
    end = code.index("):\n", at) + 3
    signature = code[at:end]
    call = "        return self._run_layers(\n            input_ids, attention_mask, position_ids, past_key_values, inputs_embeds, use_cache, return_dict\n        )\n\n"
    return code[:at] + signature + call + signature.replace("def forward(", "def _run_layers(") + code[end:]


def split_variant() -> str:
    return split_variant_of((ZIPPED / "modeling_zipped.py").read_text())


def test_a_forward_that_only_returns_a_helper_hands_it_the_role():
    info = analyze(cst.parse_module(split_variant()), ruleset("4.52").era.cache_names)
    assert info.classes["ZippedModel"].methods["forward"] is info.functions["ZippedModel._run_layers"]
    assert info.roles["base_model"] == ["ZippedModel"]


@pytest.mark.parametrize("era", ["4.52", "4.56", "5", "portable"])
def test_the_helper_migrates_in_every_era_and_the_delegate_stays(era):
    result = migrate(split_variant(), era)
    assert result.status == "migrated", [str(d) for d in result.diagnostics]
    plain = migrate((ZIPPED / "modeling_zipped.py").read_text(), era).migrated
    assert result.migrated == split_variant_of(plain).replace(
        "        return_dict: Optional[bool] = None,\n        cache=None,\n    ):\n        return self._run_layers(",
        "        return_dict: Optional[bool] = None,\n    ):\n        return self._run_layers(",
    )


def test_a_forward_that_does_more_than_return_the_helper_is_not_a_delegate():
    code = split_variant().replace(
        "        return self._run_layers(\n", "        use_cache = bool(use_cache)\n        return self._run_layers(\n"
    )
    info = analyze(cst.parse_module(code), ruleset("4.52").era.cache_names)
    assert info.classes["ZippedModel"].methods["forward"] is info.functions["ZippedModel.forward"]
    result = migrate(code, "4.56")
    assert result.status == "failed" and result.migrated == code


def test_on_4_51_3_the_split_stack_agrees_with_the_original(tmp_path):
    from cachemigrate.probe import run_probe

    original = _folder(tmp_path, "original", split_variant())
    migrated = _folder(tmp_path, "migrated", migrate(split_variant(), "4.52").migrated)
    results = run_probe(original, migrated)
    assert {r.status for r in results} <= {"pass", "skip", "setup-error"}, [(r.name, r.status) for r in results]


@pytest.mark.runtimes
@pytest.mark.parametrize("era", ["4.56", "5"])
def test_the_split_stack_passes_the_cross_version_probe_bit_for_bit(era, tmp_path):
    from cachemigrate.probe.cross import run_cross_probe
    from cachemigrate.probe.report import PASS, SKIP

    python = Path(RUNTIMES[era])
    if not python.is_file():
        pytest.skip(f"no interpreter at {python}")
    original = _folder(tmp_path, "original", split_variant())
    migrated = _folder(tmp_path, "migrated", migrate(split_variant(), era).migrated)
    report = run_cross_probe(original, migrated, migrated_python=str(python), timeout=300)
    assert {r.status for r in report.results} <= {PASS, SKIP}, [(r.name, r.status, r.detail) for r in report.results]
    assert report.max_abs_diff == 0.0, report.header()
