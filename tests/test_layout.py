"""The package's shape: no import circle among its modules (imports at module level; an import inside a function
is how a module defers a heavy dependency, and runs after every module is loaded), and the walls of
ARCHITECTURE.md: nothing on the migrate path imports the CLI, the probe, torch or transformers at module level."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "cachemigrate"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path: Path) -> set[str]:
    """The modules ``path`` imports when it is loaded (not inside functions, not under ``if TYPE_CHECKING``)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()

    def visit(statements):
        for node in statements:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(getattr(node, "orelse", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                found.add(module)
                found.update(f"{module}.{alias.name}" for alias in node.names)

    visit(ast.parse(path.read_text()).body)
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {
        name: {m for m in _top_level_imports(path) if m in modules and m != name} for name, path in modules.items()
    }


def test_no_import_circle():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return stack[stack.index(target) :] + [target]
            if target not in state:
                found = walk(target)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            circle = walk(module)
            assert circle is None, " -> ".join(circle)


def test_the_command_line_path_loads_no_engine_and_nothing_imports_the_cli():
    graph = _graph()

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo.extend(graph.get(module, ()))
        return seen

    heavy = {"cachemigrate.engine", "cachemigrate.facts.analysis", "cachemigrate.rules.loader", "cachemigrate.actions"}
    assert not reach("cachemigrate.cli.main") & heavy  # loaded when a file needs them, not on start-up
    # only the command line itself, the verifier built on its runner, and ``python -m cachemigrate`` import it
    users = {m for m, targets in graph.items() if any(t.startswith("cachemigrate.cli") for t in targets)}
    assert not {m for m in users if not m.startswith(("cachemigrate.cli", "cachemigrate.verify"))} - {
        "cachemigrate.__main__"
    }
    engine = reach("cachemigrate.engine")
    assert not [m for m in engine if m.startswith(("cachemigrate.probe", "cachemigrate.verify", "cachemigrate.cli"))]
    outside = set().union(*(_top_level_imports(PACKAGE.parent / (m.replace(".", "/") + ".py")) for m in engine
                            if (PACKAGE.parent / (m.replace(".", "/") + ".py")).is_file()))  # fmt: skip
    assert not {m.split(".")[0] for m in outside} & {"torch", "transformers"}


# the stages in the order data passes through them (docs/engine.md): a stage never imports a later one
STAGES = ["source", "views", "facts"]


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in STAGES else None


def test_early_stages_never_import_later_ones():
    graph = _graph()
    backwards = [
        f"{m} -> {t}"
        for m, targets in graph.items()
        for t in targets
        if _stage(m) and _stage(t) and STAGES.index(_stage(t)) > STAGES.index(_stage(m))
    ]
    assert not backwards
    # views are for matching: they read no facts, rules, edits or proofs
    later = ("cachemigrate.facts", "cachemigrate.rules", "cachemigrate.edit", "cachemigrate.proof")
    assert not [f"{m} -> {t}" for m, ts in graph.items() if m.startswith("cachemigrate.views.") for t in ts
                if t.startswith(later)]  # fmt: skip


def test_the_top_level_is_a_map_of_stages():
    modules = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert len(modules) <= 15, modules
    for stage in ["source", "views", "facts", "rules", "edit", "proof", "cli"]:
        assert (PACKAGE / stage / "__init__.py").read_text().startswith('"""'), stage  # each says what it does
