"""Save and reload tiny models of migrated files on each era's runtimes: how many tensors come back different.

    python bench/reload.py FILE... [--era ERA ...] [--classes NAME ...] [--settings JSON] [--fix-past-hook]

Each FILE (a modeling file of some transformers release) is migrated for each era (default: every era) by this
checkout, in memory, and written to a temporary folder. Each runtime of the era (4.52: 4.51.3, this interpreter;
4.56: 4.57.6; 5: 5.25.0; portable: all three; interpreters from $CACHEMIGRATE_TF4576_PYTHON / $CACHEMIGRATE_TF5_PYTHON)
imports the migrated file as a module of the model's transformers package, builds every model class the file
defines (a tiny config of the class's config class, ``cachemigrate/probe/tiny.py``, with ``--settings`` set over
it, seed 0), saves it with
``save_pretrained``, loads it with ``from_pretrained``, and counts the tensors of the state dict that differ (or
stay on the meta device). One line per file, era, runtime and class: ``changed N/M`` and the first names, or the
error ``save_pretrained``/``from_pretrained`` raised (one line of it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIMES = {
    "4.51.3": sys.executable,
    "4.57.6": os.environ.get("CACHEMIGRATE_TF4576_PYTHON", "/work/venvs/tf4576/bin/python"),
    "5.25.0": os.environ.get("CACHEMIGRATE_TF5_PYTHON", "/work/venvs/tf525/bin/python"),
}
ERA_RUNTIMES = {"4.52": ["4.51.3"], "4.56": ["4.57.6"], "5": ["5.25.0"], "portable": ["4.51.3", "4.57.6", "5.25.0"]}

# Run by a runtime's interpreter: argv = migrated file, model package, class names (or none: every model class)
INNER = r"""
import importlib.util, inspect, json, sys, tempfile, traceback, warnings
import torch, transformers
warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()
path, package, tiny_py, settings, wanted = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), sys.argv[5:]
spec = importlib.util.spec_from_file_location("reload_tiny", tiny_py)
tiny = importlib.util.module_from_spec(spec); sys.modules[spec.name] = tiny; spec.loader.exec_module(tiny)
spec = importlib.util.spec_from_file_location(package + ".modeling_reload", path)
mod = importlib.util.module_from_spec(spec); sys.modules[spec.name] = mod; spec.loader.exec_module(mod)
classes = [c for n, c in vars(mod).items() if inspect.isclass(c) and c.__module__ == mod.__name__
           and issubclass(c, transformers.PreTrainedModel) and not n.endswith("PreTrainedModel")]
for cls in classes:
    if wanted and cls.__name__ not in wanted:
        continue
    row = {"class": cls.__name__}
    try:
        torch.manual_seed(0)
        model = cls(tiny.tiny_config(cls.config_class, settings=settings)).eval()
        with tempfile.TemporaryDirectory() as folder:
            step = "save_pretrained"
            model.save_pretrained(folder)
            step = "from_pretrained"
            again = cls.from_pretrained(folder).eval()
        before, after = model.state_dict(), again.state_dict()
        changed = sorted(k for k in before if k not in after or after[k].is_meta or after[k].shape != before[k].shape
                         or not torch.equal(before[k], after[k]))
        row.update(total=len(before), changed=changed)
    except Exception as error:
        row["error"] = f"{step if 'step' in dir() else 'build'}: {type(error).__name__}: {str(error).splitlines()[0][:200]}"
    print("ROW " + json.dumps(row), flush=True)
"""


def migrate(path: Path, era: str, folder: Path, fix_past_hook: bool) -> Path | str:
    sys.path.insert(0, str(ROOT))
    from cachemigrate.engine import migrate_source
    from cachemigrate.results import Options
    from cachemigrate.rules.loader import load_ruleset

    result = migrate_source(path.read_text(), load_ruleset(era), Options(fix_past_hook=fix_past_hook), path=str(path))
    if result.status not in ("migrated", "clean"):
        return f"not migrated ({result.status})"
    out = folder / era / path.name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(result.migrated)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--era", action="append", choices=sorted(ERA_RUNTIMES))
    parser.add_argument("--classes", nargs="*", default=[])
    parser.add_argument("--fix-past-hook", action="store_true", help="as `cachemigrate migrate --fix-past-hook`")
    parser.add_argument("--settings", default="{}", help="config attributes set over the tiny ones (JSON)")
    args = parser.parse_args()
    total_changed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.files:
            package = f"transformers.models.{path.parent.name}"
            for era in args.era or list(ERA_RUNTIMES):
                where = Path(tmp) / path.parent.parent.parent.name / path.parent.name
                migrated = migrate(path.resolve(), era, where, args.fix_past_hook)
                if isinstance(migrated, str):
                    print(f"{path} {era}: {migrated}")
                    continue
                for runtime in ERA_RUNTIMES[era]:
                    command = [
                        RUNTIMES[runtime],
                        "-c",
                        INNER,
                        str(migrated),
                        package,
                        str(ROOT / "cachemigrate/probe/tiny.py"),
                        args.settings,
                    ]
                    run = subprocess.run(command + args.classes, capture_output=True, text=True, timeout=900)
                    rows = [json.loads(line[4:]) for line in run.stdout.splitlines() if line.startswith("ROW ")]
                    if run.returncode or not rows:
                        print(
                            f"{path} {era} on {runtime}: exit {run.returncode}: {run.stderr.strip().splitlines()[-1:]}"
                        )
                    for row in rows:
                        head = f"{path} {era} on {runtime} {row['class']}:"
                        if "error" in row:
                            print(head, row["error"])
                        else:
                            total_changed += len(row["changed"])
                            print(head, f"changed {len(row['changed'])}/{row['total']}", ", ".join(row["changed"][:4]))
    print(f"tensors changed in all: {total_changed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
