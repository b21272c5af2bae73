"""The prefilter (cachemigrate.source.prefilter) says "nothing to migrate" only where the engine would report the file
clean: checked on each kind of use, on random function bodies, on every fixture and on real modeling files.
(bench/robustness.py checks the same on a whole transformers tree; tests/test_robustness.py on a subset.)"""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachemigrate.engine import Options, migrate_source
from cachemigrate.rules.eras import cache_names
from cachemigrate.source.prefilter import nothing_to_migrate

REPO = Path(__file__).resolve().parent.parent
NAMES = cache_names("4.52")  # what the command line hands the prefilter for era 4.52
OPTIONS = Options(line_length=119)

# (statement in a function whose parameter is `past_key_values`, what the prefilter must say)
USES = [
    ("x = past_key_values.get_seq_length()", True),
    ("if past_key_values is None:\n    x = 1", True),
    ("x = 0 if past_key_values is not None else 1", True),
    ("x = None == past_key_values", True),
    ("x = isinstance(past_key_values, Cache)", True),
    ("y = f(past_key_values, cache=past_key_values)", True),
    ("return past_key_values", True),
    ("return h, past_key_values", True),
    ("out = {'past': past_key_values}", True),
    ("if past_key_values and use_cache:\n    x = 1", True),
    ("if use_cache and past_key_values:\n    x = 1", True),
    ("x = not past_key_values", True),
    ("cache = past_key_values if use_cache else None\ncache.update(k, v, 0)", True),
    ("cache = past_key_values\nreturn cache", True),
    ("past_key_values = DynamicCache()", True),
    ("for past_key_values in caches:\n    x = 1", True),
    ("x = past_key_values[0]", False),
    ("a, b = past_key_values", False),
    ("for layer in past_key_values:\n    x = layer", False),
    ("n = len(past_key_values)", False),
    ("pairs = zip(layers, past_key_values)", False),
    ("cache = past_key_values\nx = cache[0]", False),
    ("cache = past_key_values if use_cache else None\nx = cache[0][0]", False),
    ("a, cache = b, past_key_values\nx = cache[0]", False),
    ("y = f(*past_key_values)", False),
    ("y = past_key_values + (x,)", False),
    ("del past_key_values", False),
    ("with past_key_values:\n    x = 1", False),
    ("y = f'{past_key_values}'", False),
    ("assert past_key_values", False),
    ("x = past_key_values == other", False),
    ("self.cache = past_key_values", False),
    ("x: object = past_key_values", False),
    ("y = (z := past_key_values)", False),
    ("yield past_key_values", False),
    ("x = [p for p in past_key_values]", False),
    ("y = x[past_key_values, 1]", False),
    ("y = {**past_key_values}", False),
    ("y = lambda: past_key_values", False),
    ("past_key_values += (x,)", False),
    ("x = y if past_key_values is None else past_key_values[0]", False),
    ("if not isinstance(past_key_values, Cache):\n    x = past_key_values[0]", False),  # guards are not modelled
    ("def past_key_values():\n    pass", False),
    ("from past_key_values import x", False),
    ("import past_key_values", False),
    ("try:\n    x = 1\nexcept E as past_key_values:\n    pass", False),
    ("global past_key_values", False),
    ("@past_key_values\ndef g():\n    pass", False),
    ("def g(a=past_key_values[0]):\n    pass", False),
]


def _module(body: str, param: str = "past_key_values") -> str:
    return f"import torch\n\n\nclass A(nn.Module):\n    def forward(self, x, {param}=None):\n{textwrap.indent(body, ' ' * 8)}\n"


def _engine_clean(code: str) -> bool:
    from cachemigrate.rules.loader import load_ruleset

    return migrate_source(code, load_ruleset("4.52"), OPTIONS).status == "clean"


@pytest.mark.parametrize("body, expected", USES, ids=[u[0].splitlines()[0] for u in USES])
def test_each_kind_of_use(body, expected):
    code = _module(body)
    assert nothing_to_migrate(code, NAMES) is expected
    if expected:
        assert _engine_clean(code)


def test_files_without_a_cache_name_or_that_do_not_parse():
    assert nothing_to_migrate("def f(x):\n    return x[0]\n", NAMES)
    assert nothing_to_migrate("# the past is gone\nx = 'past_key_values[0]'\n", NAMES)  # text, but no variable
    assert not nothing_to_migrate("def f(past):\n    return past[0\n", NAMES)  # the engine says what is wrong
    assert nothing_to_migrate("def f(past_key_values):\n    return past_key_values[0]\n", ("layer_past",))


def test_nested_and_module_level_functions_count_too():
    assert not nothing_to_migrate("def f(past):\n    return past[0]\n", NAMES)
    nested = "def outer(x):\n    def inner(layer_past):\n        return layer_past[0]\n    return inner\n"
    assert not nothing_to_migrate(nested, NAMES)
    lambda_only = "f = lambda past: past\n"
    assert nothing_to_migrate(lambda_only, NAMES) and _engine_clean(lambda_only)


# --------------------------------------------------------------------------------------------------------------
# The claim on random bodies, fixtures and real files
# --------------------------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from([body for body, _ in USES]), min_size=1, max_size=4), st.sampled_from(NAMES))
def test_random_bodies_the_prefilter_skips_are_clean_for_the_engine(bodies, name):
    code = _module("\n".join(bodies).replace("past_key_values", name), param=name)
    if nothing_to_migrate(code, NAMES):
        assert _engine_clean(code), code


FIXTURES = sorted(p for p in (REPO / "fixtures").rglob("*.py"))


def test_every_fixture_the_prefilter_skips_is_clean_for_the_engine():
    skipped = [path for path in FIXTURES if nothing_to_migrate(path.read_text(encoding="utf-8"), NAMES)]
    assert skipped and len(skipped) < len(FIXTURES)
    wrong = [str(path.relative_to(REPO)) for path in skipped if not _engine_clean(path.read_text(encoding="utf-8"))]
    assert wrong == []
    # and the legacy fixtures are all left to the engine (those of the import rules, CM402/CM450, name no cache: a
    # file without cache code has nothing to migrate, its imports are fixed only with the cache code they serve)
    named = re.compile(r"\b(?:%s)\b" % "|".join(NAMES))
    befores = [p for p in FIXTURES if p.name.endswith("before.py") and "4.52" in p.parts and named.search(p.read_text())]
    assert befores and not [p for p in befores if p in skipped]


def test_the_prefilter_imports_neither_libcst_nor_the_engine():
    code = (
        "import sys, cachemigrate.source.prefilter as p\n"
        "assert p.nothing_to_migrate('def f(past):\\n    return past.x\\n', ('past',))\n"
        "print(sorted(m for m in sys.modules if m.startswith(('libcst', 'black', 'cachemigrate.engine'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert out.strip() == "[]"
