"""The tied parameter groups of a transformers modeling file (a release's original or a migrated copy), built under
the python that runs this (4.51.3's, or a runtime venv's), for comparing an original with its migrated copy.

    python bench/tie_groups.py FILE --module transformers.models.bark.modeling_bark \\
        --config transformers.models.bark.configuration_bark.BarkFineConfig --set num_layers=1 hidden_size=16 \\
        --classes BarkFineModel [--flag share_encoder_decoder_embeddings]

FILE is imported as ``--module`` (its relative imports read the running transformers), each class is built from the
config class with ``--set`` values and ``tie_word_embeddings`` true, false and not set (and each ``--flag`` true and
false), and one JSON line is printed: ``{"Class/<flag>=<v>/<tie>": [[names of one Parameter], ...]}`` (or the
exception where a build fails)."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import itertools
import json
import sys


def groups(model) -> list[list[str]]:
    by_id: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(parameter), []).append(name)
    return sorted(sorted(names) for names in by_id.values() if len(names) > 1)


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file")
    parser.add_argument("--module", required=True)
    parser.add_argument("--config", required=True, help="dotted path of the config class")
    parser.add_argument("--set", nargs="*", default=[], help="key=value (JSON values)")
    parser.add_argument("--classes", nargs="+", required=True)
    parser.add_argument("--flag", nargs="*", default=[], help="config flags built true and false")
    args = parser.parse_args()
    import torch

    spec = importlib.util.spec_from_file_location(args.module, args.file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[args.module] = module
    spec.loader.exec_module(module)
    owner, _, name = args.config.rpartition(".")
    config_class = getattr(importlib.import_module(owner), name)
    chosen = dict(item.split("=", 1) for item in args.set)
    chosen = {k: _value(v) for k, v in chosen.items()}
    found = {}
    for cls in args.classes:
        for values in itertools.product((True, False), repeat=len(args.flag)):
            flags = dict(zip(args.flag, values))
            prefix = "".join(f"/{f}={v}" for f, v in flags.items())
            for tie in (True, False, None):
                given = {} if tie is None else {"tie_word_embeddings": tie}
                torch.manual_seed(0)
                try:
                    model = getattr(module, cls)(config_class(**chosen, **flags, **given))
                    found[f"{cls}{prefix}/{tie}"] = groups(model)
                except Exception as exc:  # noqa: BLE001 - reported as the cell's answer
                    found[f"{cls}{prefix}/{tie}"] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(found, sort_keys=True))


if __name__ == "__main__":
    main()
