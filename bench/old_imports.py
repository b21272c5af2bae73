"""Which names the PyTorch modeling files of older transformers releases import from transformers still import on
the runtimes the eras target (a measurement, not a test).

    python bench/old_imports.py                              # 4.6.1, 4.20.1, 4.30.2, 4.35.2 on 4.51.3, 4.57.6, 5.25.0
    python bench/old_imports.py --releases 4.6.1 --markdown /tmp/old_imports.md --json /tmp/old_imports.json
    python bench/old_imports.py --missing-only               # only the rows some runtime lacks
    python bench/old_imports.py --files /tmp/m5/*.py --runtimes 5.25.0   # files of your own (migrated ones)

For each ``/work/corpora/tf-X/transformers/models/*/modeling_*.py`` (PyTorch: not ``modeling_tf_*`` nor
``modeling_flax_*``), every ``from <transformers module> import <name>`` (relative imports resolved against the
file's package, absolute ``transformers.`` ones; the model's own package excluded, as the migrated file keeps its
companions) and every ``import transformers.<module>`` is collected. Each distinct (module, name) is then tried
with ``from transformers.<module> import <name>`` in a subprocess of each runtime's interpreter
($CACHEMIGRATE_TF4513_PYTHON, default this one; $CACHEMIGRATE_TF4576_PYTHON, default /work/venvs/tf4576/bin/python;
$CACHEMIGRATE_TF5_PYTHON, default /work/venvs/tf525/bin/python). Where an import fails, the table names the
transformers modules of that runtime that define the name (a top-level ``def``/``class``/assignment of the name,
read from the installed sources, not imported), so the caller sees where the name lives now.

The table has one row per (module, name): how many files of each release import it, and per runtime ``ok`` or
``missing`` (with the new homes).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

CORPORA = Path("/work/corpora")
RELEASES = ["4.6.1", "4.20.1", "4.30.2", "4.35.2"]
RUNTIMES = {
    "4.51.3": os.environ.get("CACHEMIGRATE_TF4513_PYTHON", sys.executable),
    "4.57.6": os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"),
    "5.25.0": os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"),
}

# run in each runtime: {"module:name": "ok" | "missing: <error>"} and, for the missing names, the modules defining them
_PROBE = r"""
import ast, importlib, json, sys
from pathlib import Path
pairs = json.load(sys.stdin)
result, homes = {}, {}
import transformers
root = Path(transformers.__file__).parent
for key in pairs:
    module, _, name = key.partition(":")
    try:
        mod = importlib.import_module("transformers" + ("." + module if module else ""))
        if name:
            getattr(mod, name)
        result[key] = "ok"
    except Exception as exc:
        result[key] = "missing: " + type(exc).__name__
missing = {key.partition(":")[2] for key, v in result.items() if v != "ok" and key.partition(":")[2]}
if missing:
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).with_suffix("")
        if rel.parts[0] == "models" or "tf" in rel.name.split("_") or "flax" in rel.name:
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except Exception:
            continue
        for node in tree.body:
            names = []
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            for found in names:
                if found in missing:
                    mod = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
                    homes.setdefault(found, []).append(mod)
print(json.dumps({"result": result, "homes": {k: sorted(v) for k, v in homes.items()},
                  "version": transformers.__version__}))
"""


def modeling_files(release: str) -> list[Path]:
    models = CORPORA / f"tf-{release}" / "transformers" / "models"
    return sorted(
        p
        for p in models.glob("*/modeling_*.py")
        if not p.name.startswith(("modeling_tf_", "modeling_flax_"))
    )


def imports_of(path: Path) -> list[tuple[str, str]]:
    """(module relative to transformers, name or "") of each import of a transformers module outside the model's
    own package."""
    package = ["models", path.parent.name]  # transformers.models.<model>
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level == 1:
                    continue  # the model's own package: its companions travel with it
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            elif node.module and node.module.startswith("transformers."):
                module = node.module[len("transformers.") :]
            else:
                continue
            if module.startswith(".".join(package) + ".") or module == ".".join(package):
                continue
            found.extend((module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.extend(
                (alias.name[len("transformers.") :], "")
                for alias in node.names
                if alias.name.startswith("transformers.")
            )
    return found


def probe(python: str, keys: list[str]) -> dict:
    if not Path(python).exists():
        return {"result": {}, "homes": {}, "version": None}
    done = subprocess.run(
        [python, "-c", _PROBE], input=json.dumps(keys), capture_output=True, text=True, timeout=900
    )
    if done.returncode:
        raise SystemExit(f"{python}: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", default=",".join(RELEASES))
    parser.add_argument("--markdown", type=Path)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--missing-only", action="store_true", help="only the rows some runtime lacks")
    parser.add_argument(
        "--files", nargs="+", type=Path, help="measure these files instead (one column: 'files'); a file's package is "
        "taken as transformers.models.<its folder>",
    )
    parser.add_argument("--runtimes", default=",".join(RUNTIMES), help="which runtimes (default: all three)")
    args = parser.parse_args(argv)
    releases = [r.strip() for r in args.releases.split(",") if r.strip()]
    users: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    sets = {"files": args.files} if args.files else {release: modeling_files(release) for release in releases}
    releases = list(sets)
    for release, paths in sets.items():
        for path in paths:
            for module, name in imports_of(path):
                users[f"{module}:{name}"][release].add(str(path) if args.files else path.parent.name)
    keys = sorted(users)
    chosen = [r.strip() for r in args.runtimes.split(",") if r.strip()]
    runs = {runtime: probe(RUNTIMES[runtime], keys) for runtime in chosen}
    rows = []
    for key in keys:
        module, _, name = key.partition(":")
        row = {"module": module, "name": name, "files": {r: len(users[key][r]) for r in releases}, "runtimes": {}}
        for runtime, run in runs.items():
            state = run["result"].get(key, "not run")
            if state.startswith("missing") and name:
                state += " (defined in: " + (", ".join(run["homes"].get(name, [])) or "nowhere") + ")"
            row["runtimes"][runtime] = state
        rows.append(row)
    shown = [r for r in rows if not args.missing_only or any(v != "ok" for v in r["runtimes"].values())]
    head = ["import", *releases, *runs]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in shown:
        what = f"`{row['module'] or 'transformers'}:{row['name']}`" if row["name"] else f"`{row['module']}`"
        cells = [what, *(str(row["files"][r]) for r in releases), *row["runtimes"].values()]
        lines.append("| " + " | ".join(cells) + " |")
    versions = ", ".join(f"{k}={v['version']}" for k, v in runs.items())
    summary = (
        f"{len(rows)} distinct imports over {', '.join(releases)} (runtimes {versions}); "
        + "; ".join(
            f"missing on {rt}: {sum(1 for r in rows if r['runtimes'][rt] != 'ok')}" for rt in runs
        )
    )
    text = "\n".join([summary, "", *lines]) + "\n"
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
