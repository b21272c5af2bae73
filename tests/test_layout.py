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
    assert not [m for m, targets in graph.items() if "cachemigrate.cli.main" in targets]
    engine = reach("cachemigrate.engine")
    assert not [m for m in engine if m.startswith(("cachemigrate.probe", "cachemigrate.verify", "cachemigrate.cli.main"))]
    outside = set().union(*(_top_level_imports(PACKAGE.parent / (m.replace(".", "/") + ".py")) for m in engine
                            if (PACKAGE.parent / (m.replace(".", "/") + ".py")).is_file()))  # fmt: skip
    assert not {m.split(".")[0] for m in outside} & {"torch", "transformers"}
