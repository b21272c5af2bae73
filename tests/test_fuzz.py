"""Fuzzing the whole bytes-in, bytes-out path with mutated fixture sources (hypothesis, derandomized).

Each example takes a legacy fixture (fixtures/4.52/*/before.py, a few of the later eras' or the tinyfork model),
picks an era (every built-in one: each era's templates are reached), and mutates it: local
variables renamed consistently (libcst scope analysis), adjacent independent statements swapped, comments and
blank lines added, and CRLF line endings or a BOM. Whatever the engine makes of the mutant, it must hold that:
nothing raises, a migrated file compiles, a second run changes nothing, a file left unchanged is byte-identical,
and a file that is CRLF throughout stays CRLF throughout.
"""

import functools
import random
from pathlib import Path

import libcst as cst
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from libcst.metadata import FunctionScope, MetadataWrapper, ScopeProvider

from cachemigrate.engine import Options, migrate_source
from cachemigrate.cli.runner import migrate_bytes
from cachemigrate.rules.loader import load_ruleset
from cachemigrate.rules.eras import available_eras
from cachemigrate.source.decode import BOM, newline_of

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
# Whole models (migrated by every tier or refused with a reason) and per-rule excerpts that the whole rule set
# migrates; plus a few excerpts it refuses (a required rule finds nothing in them), for the unchanged path.
MODELS = [FIXTURES / "4.52" / name / "before.py" for name in ("full", "full_static", "CM001", "CM002", "CM016", "CM018",
                                                              "CM019")] + [
    FIXTURES / "tinyfork" / "tinyfork" / "modeling_tinyfork.py"
]  # fmt: skip
EXCERPTS = [FIXTURES / "4.52" / name / "before.py" for name in ("CM010", "CM020", "CM047", "CM060")]
# what the templates of the later eras are written for: encoder-decoder stacks, heads and generation hooks that take
# `cache=`, a transformers-2 `prepare_inputs_for_generation` with no past parameter
ERA_EXCERPTS = [FIXTURES / "4.52" / "CM205" / "before.py", FIXTURES / "4.52" / "CM210" / "before.py"] + [
    FIXTURES / "5" / name for name in ("CM404/before.py", "CM408/before.py", "CM408/kwargs_only_nomatch.py")
]
SOURCES = MODELS + EXCERPTS + ERA_EXCERPTS
ERAS = available_eras()
SETTINGS = settings(
    max_examples=20, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)


# ------------------------------------------------------------------------------------------------------------------
# Mutations (each keeps the file valid Python; what the code means may change, which does not matter here)
# ------------------------------------------------------------------------------------------------------------------


class _Renamer(cst.CSTTransformer):
    def __init__(self, new_names: dict[cst.Name, str]) -> None:
        self.new_names = new_names

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        name = self.new_names.get(original)
        return updated.with_changes(value=name) if name else updated


def rename_locals(code: str, rng: random.Random) -> str:
    """Rename some local variables of functions, every assignment and use of each (closures included)."""
    wrapper = MetadataWrapper(cst.parse_module(code))
    scopes = {s for s in wrapper.resolve(ScopeProvider).values() if isinstance(s, FunctionScope)}
    new_names: dict[cst.Name, str] = {}
    for scope in sorted(scopes, key=lambda s: str(getattr(s.node, "name", ""))):
        by_name: dict[str, list] = {}
        for assignment in scope.assignments:
            if isinstance(getattr(assignment, "node", None), cst.Name):  # not parameters, imports or classes
                by_name.setdefault(assignment.name, []).append(assignment)
        params = {p.name.value for p in getattr(scope.node, "params", cst.Parameters()).params} if hasattr(
            scope.node, "params") else set()  # fmt: skip
        for name, assignments in sorted(by_name.items()):
            if name in params or scope.parent[name] or rng.random() < 0.5:
                continue  # a parameter, or a name also bound outside (global/nonlocal): left alone
            new = f"{name}_{rng.randrange(100)}"
            for assignment in assignments:
                new_names[assignment.node] = new
                for access in assignment.references:
                    if isinstance(access.node, cst.Name):
                        new_names[access.node] = new
    return wrapper.module.visit(_Renamer(new_names)).code


def _names(node: cst.CSTNode) -> set[str]:
    found: set[str] = set()

    class Collect(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found.add(name.value)

    node.visit(Collect())
    return found


_FLOW = (cst.Return, cst.Raise, cst.Break, cst.Continue, cst.Global, cst.Nonlocal, cst.Del, cst.ImportFrom, cst.Import)


def _swappable(line: cst.CSTNode) -> bool:
    if not isinstance(line, cst.SimpleStatementLine):
        return False
    first = line.body[0]
    if isinstance(first, cst.Expr) and isinstance(first.value, (cst.SimpleString, cst.ConcatenatedString)):
        return False  # a docstring
    return not any(isinstance(statement, _FLOW) for statement in line.body)


class _Reorder(cst.CSTTransformer):
    """Swap some adjacent simple statements that share no names (neither reads or writes what the other binds)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def _swap(self, body):
        body = list(body)
        for i in range(len(body) - 1):
            a, b = body[i], body[i + 1]
            if _swappable(a) and _swappable(b) and not _names(a) & _names(b) and self.rng.random() < 0.5:
                body[i], body[i + 1] = b.with_changes(leading_lines=a.leading_lines), a.with_changes(
                    leading_lines=b.leading_lines)  # fmt: skip
        return body

    def leave_IndentedBlock(self, original, updated):
        return updated.with_changes(body=self._swap(updated.body))


class _Annotate(cst.CSTTransformer):
    """Comments and blank lines before some statements, comments at the end of some lines."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def leave_SimpleStatementLine(self, original, updated):
        roll = self.rng.random()
        if roll < 0.15:
            extra = [cst.EmptyLine(), cst.EmptyLine(comment=cst.Comment(f"# fuzz note {self.rng.randrange(99)}"))]
            return updated.with_changes(leading_lines=[*updated.leading_lines, *extra])
        if roll < 0.25 and updated.trailing_whitespace.comment is None:
            comment = cst.Comment(f"# fuzz: kept {self.rng.randrange(99)}")
            trailing = updated.trailing_whitespace.with_changes(whitespace=cst.SimpleWhitespace("  "), comment=comment)
            return updated.with_changes(trailing_whitespace=trailing)
        return updated


def mutate(code: str, seed: int, rename: bool, reorder: bool, annotate: bool) -> str:
    rng = random.Random(seed)
    if rename:
        code = rename_locals(code, rng)
    if reorder:
        code = cst.parse_module(code).visit(_Reorder(rng)).code
    if annotate:
        code = cst.parse_module(code).visit(_Annotate(rng)).code
    return code


# ------------------------------------------------------------------------------------------------------------------
# The properties
# ------------------------------------------------------------------------------------------------------------------


def check_properties(data: bytes, ruleset, options: Options, path: str) -> None:
    result = migrate_bytes(data, ruleset, options, path=path)  # raises nothing
    assert result.status != "error", f"an internal error: {result.diagnostics}"
    if not result.changed:
        assert result.encoded() == data, "a file left unchanged must be byte-identical"
        return
    output = result.encoded()
    compile(output, path, "exec", dont_inherit=True)
    again = migrate_bytes(output, ruleset, options, path=path)
    assert not again.changed, f"a second run changed it ({again.status}: {again.diagnostics})"
    text = data.decode("utf-8-sig")
    if newline_of(text) == "\r\n":
        assert newline_of(output.decode("utf-8-sig")) == "\r\n", "a CRLF file must stay CRLF throughout"
    assert output.startswith(BOM) == data.startswith(BOM)


@functools.lru_cache(maxsize=None)
def ruleset(era: str):
    return load_ruleset(era)


@SETTINGS
@given(
    source=st.sampled_from(SOURCES),
    era=st.sampled_from(ERAS),
    line_ending=st.sampled_from(["lf", "crlf", "bom"]),
    tier=st.sampled_from(["dynamic", "static"]),
    seed=st.integers(0, 2**16),
    rename=st.booleans(),
    reorder=st.booleans(),
    annotate=st.booleans(),
)
def test_mutated_fixtures_keep_the_properties(source, era, line_ending, tier, seed, rename, reorder, annotate):
    code = mutate(source.read_text(encoding="utf-8"), seed, rename, reorder, annotate)
    compile(code, str(source), "exec", dont_inherit=True)  # the mutant is valid Python
    data = code.encode("utf-8")
    if line_ending == "crlf":
        data = data.replace(b"\n", b"\r\n")
    elif line_ending == "bom":
        data = BOM + data
    check_properties(data, ruleset(era), Options(tier=tier, line_length=119), source.parent.name + ".py")


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("source", ERA_EXCERPTS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_every_era_keeps_the_properties_on_the_era_excerpts(era, source):
    """Each era's rule set, unmutated, on what its own templates are written for (a rule whose code needs a hole
    the function lacks, such as `{cache}` in a function with no past parameter, is not applied there)."""
    check_properties(source.read_bytes(), ruleset(era), Options(line_length=119), source.name)


def test_the_mutations_do_mutate():
    code = (FIXTURES / "4.52" / "full" / "before.py").read_text(encoding="utf-8")
    renamed = rename_locals(code, random.Random(1))
    assert renamed != code and cst.parse_module(renamed)
    assert "past_k_" in renamed or "present_" in renamed or "hidden_" in renamed
    assert mutate(code, 3, False, True, False) != code  # some statements swapped
    annotated = mutate(code, 3, False, False, True)
    assert "# fuzz note" in annotated and "# fuzz: kept" in annotated


@pytest.mark.parametrize(
    "source, tier",
    [(path, "dynamic") for path in MODELS] + [(FIXTURES / "4.52" / "full_static" / "before.py", "static")],
    ids=[path.parent.name for path in MODELS] + ["full_static-static"],
)
def test_the_engine_itself_keeps_crlf(ruleset_452, source, tier):
    """The engine, handed CRLF text, gives CRLF text back: the pipeline's own fix-up (Codec.keep_newlines) should
    have nothing to do."""
    text = source.read_text(encoding="utf-8").replace("\n", "\r\n")
    result = migrate_source(text, ruleset_452, Options(tier=tier, line_length=119), path=str(source))
    assert newline_of(result.migrated) == "\r\n"
