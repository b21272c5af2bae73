"""The shared planning walk (cachemigrate.actions.together) plans what each rule's own walk plans: the same
migrated text, diagnostics and matches per rule, on the fixtures of every era, as when every action walks the
module alone (:meth:`Action.plan`, libcst's visitor protocol: ``on_visit``/``on_leave`` per node)."""

from pathlib import Path

import libcst as cst
import pytest

from cachemigrate.actions import together
from cachemigrate.actions.base import Action
from cachemigrate.engine import migrate_source
from cachemigrate.results import Options
from cachemigrate.rules.loader import load_ruleset
from cachemigrate.traverse import nodes

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _each_alone(module, actions):
    for action in actions:
        Action.plan(action, module)


def _cases():
    for era in ("4.52", "4.56", "5"):
        paths = sorted(p for p in (FIXTURES / era).rglob("*.py") if p.name.endswith(("before.py", "nomatch.py")))
        for path in paths[::3]:  # a third of them: the whole set is bench/equality.py's
            yield pytest.param(era, path, id=f"{era}/{path.relative_to(FIXTURES / era)}")


@pytest.mark.parametrize(("era", "path"), list(_cases()))
def test_the_shared_walk_plans_what_each_rule_walking_alone_plans(era, path, monkeypatch):
    code = path.read_text(encoding="utf-8")
    ruleset, options = load_ruleset(era), Options(tier="dynamic", line_length=119)
    shared = migrate_source(code, ruleset, options, path=path.name)
    monkeypatch.setattr("cachemigrate.rules.planning.plan_together", _each_alone)
    alone = migrate_source(code, ruleset, options, path=path.name)
    assert shared.migrated == alone.migrated
    assert [str(d) for d in shared.diagnostics] == [str(d) for d in alone.diagnostics]
    assert shared.applied == alone.applied


def test_trivia_holds_only_trivia():
    """What the shared walk may skip whole: a trivia node's subtree is trivia, on code with every kind of it."""
    module = cst.parse_module(
        "x = (a  # c\n  + b) ** -c if not a in b and c is not d else e @ f\n"
        "y <<= 1; z[1:2, ...] //= 3\n\n# end\nfrom m import *\n"
    )
    found = [node for node in nodes(module) if type(node) in together.TRIVIA]
    assert {type(node).__name__ for node in found} >= {"Comment", "Newline", "Power", "Minus", "Not", "IsNot"}
    assert all(type(inner) in together.TRIVIA for node in found for inner in nodes(node))
