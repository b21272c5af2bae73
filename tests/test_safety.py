"""Never touch what no rule claimed: determinism of whole migrations, and the region proof rejecting faulty
actions and a re-created applier bug (the file is then left byte-identical and the rule is named)."""

from __future__ import annotations

import gc
import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.edit import apply as apply_module
from cachemigrate.actions import ACTIONS
from cachemigrate.actions.replace_statements import ReplaceStatements
from cachemigrate.actions.replace_statements import _Planner as ReplaceStatementsPlanner
from cachemigrate.edit.edits import Replace
from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset
from cachemigrate.rules.schema import Rule, RuleSet

transformers = pytest.importorskip("transformers")
MODELS = Path(transformers.__file__).parent / "models"
FAMILY = ["gpt2", "decision_transformer", "imagegpt", "ctrl"]
TIERS = ["dynamic", "static", "upstream"]
RULESET = load_ruleset("4.52")
FULL = Path(__file__).resolve().parent.parent / "fixtures" / "4.52" / "full" / "before.py"


def _source(name: str) -> str:
    return (MODELS / name / f"modeling_{name}.py").read_text()


def _digest(result) -> str:
    return hashlib.sha256(f"{result.status}\0{result.migrated}".encode()).hexdigest()


_DIGESTS = """
import hashlib, json, sys
from pathlib import Path
import transformers
from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.loader import load_ruleset
ruleset = load_ruleset("4.52")
models = Path(transformers.__file__).parent / "models"
out = {}
for name in %r:
    source = (models / name / f"modeling_{name}.py").read_text()
    for tier in %r:
        r = migrate_source(source, ruleset, Options(tier=tier, line_length=119))
        out[f"{name}/{tier}"] = hashlib.sha256(f"{r.status}\\0{r.migrated}".encode()).hexdigest()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def family_results() -> dict[tuple[str, str], object]:
    """The GPT-2 family migrated in every tier, once for the module (about 2 s a migration)."""
    return {
        (name, tier): migrate_source(_source(name), RULESET, Options(tier=tier, line_length=119))
        for name in FAMILY
        for tier in TIERS
    }


def test_every_family_file_and_tier_gives_one_output_in_one_process_and_across_processes(family_results):
    """The GPT-2 family in every tier: the module's first migration, again in this process with allocation noise
    in between (the old node-identity bug needed a freed block's address to be reused), and once in a fresh
    process started at the same time."""
    child = subprocess.Popen(
        [sys.executable, "-c", _DIGESTS % (FAMILY, TIERS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    seen = {f"{name}/{tier}": {_digest(result)} for (name, tier), result in family_results.items()}
    noise = random.Random(7)
    for name in FAMILY:
        source = _source(name)
        for tier in TIERS:
            junk = [cst.Name(f"n{i}") for i in range(noise.randint(0, 20000))]  # churn the allocator
            gc.collect()
            result = migrate_source(source, RULESET, Options(tier=tier, line_length=119))
            seen[f"{name}/{tier}"].add(_digest(result))
            del junk
    stdout, stderr = child.communicate(timeout=900)
    assert child.returncode == 0, stderr
    for key, digest in json.loads(stdout).items():
        seen[key].add(digest)
    assert {key: len(digests) for key, digests in seen.items()} == {key: 1 for key in seen}


def test_the_gpt2_family_migrates_in_the_tiers_it_did_before(family_results):
    outcome = {key: result.status for key, result in family_results.items()}
    expected = {(name, tier): "migrated" for name in FAMILY for tier in TIERS}
    expected[("ctrl", "static")] = expected[("ctrl", "upstream")] = "failed"  # refused with a reason (CM047)
    assert outcome == expected


# ------------------------------------------------------------------------------------------------------------------
# Faults injected on purpose
# ------------------------------------------------------------------------------------------------------------------


def test_the_old_emptied_if_bug_recreated_in_the_applier_is_caught_and_the_file_kept(monkeypatch):
    """Re-create the CM017 bug: the applier also removes an unrelated ``if output_attentions:`` block. The region
    proof must reject the result, name a rule, and give the file back unchanged."""
    source = _source("gpt2")
    real = apply_module._Applier._emptied

    def faulty(self, original, result):
        if isinstance(original, cst.If) and cst.Module(body=[]).code_for_node(original.test) == "output_attentions":
            return cst.RemoveFromParent()
        return real(self, original, result)

    monkeypatch.setattr(apply_module._Applier, "_emptied", faulty)
    result = migrate_source(source, RULESET, Options(line_length=119), path="modeling_gpt2.py")
    assert result.status == "error"
    assert result.migrated == source
    [diagnostic] = result.diagnostics
    assert diagnostic.code == "CM999"
    assert "internal error: rule CM" in diagnostic.message
    assert source.splitlines()[diagnostic.line - 1].strip() == "if output_attentions:"


class _DropsANeighbour(ReplaceStatements):
    """A faulty action: it claims only the header of the function it edits, but its edit also drops the
    statement just before the one it matched."""

    name = "drops_a_neighbour"

    def planner(self):
        return _DropsPlanner(self)


class _DropsPlanner(ReplaceStatementsPlanner):
    def visit_IndentedBlock(self, node):
        pass

    def visit_FunctionDef(self, node):
        if len(self.function_stack) != 1 or not self.in_function_scope():
            return
        body = list(node.body.body)
        for index, stmt in enumerate(body[1:], 1):
            if cst.Module(body=[stmt]).code.strip().endswith("= () if use_cache else None"):
                victim = body[index - 1]

                def build(updated, resolve, victim=victim):
                    gone = resolve.node(victim)
                    statements = [s for s in updated.body.body if s is not gone]
                    return updated.with_changes(body=updated.body.with_changes(body=statements))

                self.action.changes += 1
                edit = Replace(self.action.rule.id, node, build, self.path_to(node), (victim,), claim="header")
                self.action.edits.append(edit)


def test_a_faulty_action_that_drops_a_statement_next_to_its_match_is_rejected(monkeypatch):
    monkeypatch.setitem(ACTIONS, _DropsANeighbour.name, _DropsANeighbour)
    faulty = Rule(
        id="CM990",
        name="faulty",
        description="Drops the statement before its match",
        era="4.52",
        tier="dynamic",
        role="base_model",
        functions=("forward",),
        action=_DropsANeighbour.name,
        params={"pattern": "{x} = () if {y} else None", "replacement": "pass"},
        order=5,
    )
    ruleset = RuleSet(RULESET.era, (*RULESET.rules, faulty))
    source = FULL.read_text()
    assert migrate_source(source, RULESET, Options(line_length=119)).status == "migrated"
    result = migrate_source(source, ruleset, Options(line_length=119), path="before.py")
    assert result.status == "error" and result.migrated == source
    [diagnostic] = result.diagnostics
    assert diagnostic.code == "CM999" and "rule CM990" in diagnostic.message
    lines = source.splitlines()
    anchor = next(i for i, line in enumerate(lines) if line.strip().endswith("= () if use_cache else None"))
    assert diagnostic.line == anchor  # the dropped statement (line numbers count from 1), right before the match


def test_a_rule_that_removes_an_assignment_still_read_is_caught_as_an_unbound_name():
    """A (wrong) rule that removes the statement building the present, which the attention still returns: the
    removal is claimed, so the region proof accepts it, and `present` is no cache, so the legacy audit does
    too. The unbound-name check refuses the result: it would be a NameError at run time."""
    wrong = Rule(
        id="CM991",
        name="drops-the-present",
        description="Removes the present the attention still returns",
        era="4.52",
        tier="dynamic",
        role="attention",
        functions=("forward",),
        action="replace_statements",
        params={"pattern": "{present} = ({key}, {value}) if {use_cache} else None", "replacement": ""},
        order=5,
    )
    source = (FULL.parent.parent / "CM002" / "before.py").read_text()
    assert migrate_source(source, RULESET, Options(line_length=119)).status == "migrated"
    result = migrate_source(source, RuleSet(RULESET.era, (*RULESET.rules, wrong)), Options(line_length=119))
    assert result.status == "error" and result.migrated == source
    [diagnostic] = result.diagnostics
    assert diagnostic.code == "CM999" and "reads `present`" in diagnostic.message
