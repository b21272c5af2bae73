"""Run by tests/test_tied_weights_runtimes.py under a runtime's python: ``tied_groups.py FILE...`` builds every
class of each FILE that defines ``_tied_weights_keys`` or ``get_output_embeddings``, or is a PreTrainedModel with an
``__init__(self, config)`` of its own, from a small config, with
``tie_word_embeddings`` true, false and not set (and, for each other flag of the config the file tests in an ``if``,
``if config.<flag>:``, with that flag true and false: ``Class/<flag>=<value>/<tie>``), and prints (JSON, one line) which parameter names are one
Parameter: ``{FILE: {"Class/True": [[name, ...], ...]}}``; a file that fails gives ``{FILE: "<exception>"}``."""

import importlib.util
import itertools
import json
import re
import sys

import torch
from transformers import PretrainedConfig


def groups(model) -> list[list[str]]:
    by_id: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(parameter), []).append(name)
    return sorted(sorted(names) for names in by_id.values() if len(names) > 1)


def _built_alone(cls) -> bool:
    """A model of the file built from its config alone (`__init__(self, config)`), which may share what it builds
    by handing a module to a sub-module: the base model of a head."""
    from transformers import PreTrainedModel

    init = vars(cls).get("__init__")
    if not issubclass(cls, PreTrainedModel) or init is None:
        return False
    names = init.__code__.co_varnames[: init.__code__.co_argcount]
    return names == ("self", "config")


def built(path: str, index: int) -> dict:
    spec = importlib.util.spec_from_file_location(f"tied_fixture_{index}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = {}
    with open(path) as source:
        flags = sorted(set(re.findall(r"\bif (?:self\.)?config\.(\w+):", source.read())) - {"tie_word_embeddings"})
    for name, cls in sorted(vars(module).items()):
        if not isinstance(cls, type) or cls.__module__ != module.__name__:
            continue
        listed = "_tied_weights_keys" in vars(cls) or "get_output_embeddings" in vars(cls)
        if not listed and not _built_alone(cls):
            continue
        for values in itertools.product((True, False), repeat=len(flags)):
            chosen = dict(zip(flags, values))
            prefix = "".join(f"/{flag}={value}" for flag, value in chosen.items())
            for tie in (True, False, None):  # None: not set, the config class's default
                torch.manual_seed(0)
                given = {} if tie is None else {"tie_word_embeddings": tie}
                config = PretrainedConfig(vocab_size=11, d_model=8, n_embd=8, n_layer=1, **chosen, **given)
                found[f"{name}{prefix}/{tie}"] = groups(cls(config))
    return found


def main(paths: list[str]) -> None:
    found = {}
    for index, path in enumerate(paths):
        try:
            found[path] = built(path, index)
        except Exception as exc:  # noqa: BLE001 - reported to the test, which says what it expected
            found[path] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(found, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1:])
