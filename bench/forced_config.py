"""Which of transformers' own config classes set an attribute whatever they are given (5.x's T5-family configs
always set ``tie_word_embeddings = True``): the data of ``[changed.forced_config]`` in ``rules/5/era.toml``.

Run it with each runtime's interpreter (it imports every ``configuration_*`` module of that transformers):

    /work/venvs/tf525/bin/python bench/forced_config.py            # 5.25.0: 11 classes
    .venv/bin/python bench/forced_config.py                        # 4.51.3: none

For each config class of ``transformers.models``, ``cls(ATTRIBUTE=GIVEN)`` is built; a class whose attribute then
differs from what it was given is printed, with the attribute where it kept the given value, if any (T5's
``scale_decoder_outputs``), as the TOML table the era file holds.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import pkgutil
import warnings

CANDIDATES = ("scale_decoder_outputs",)  # where a class keeps what it was given, measured not assumed


def measure(attribute: str, given) -> tuple[str, dict[str, str | None], int]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    warnings.filterwarnings("ignore")
    import transformers
    from transformers import models

    transformers.logging.set_verbosity_error()
    base = getattr(transformers, "PreTrainedConfig", None) or transformers.PretrainedConfig
    forced: dict[str, str | None] = {}
    kept = 0
    for info in pkgutil.iter_modules(models.__path__):
        try:
            package = importlib.import_module(f"transformers.models.{info.name}")
        except Exception:  # noqa: BLE001 - a model whose optional dependency is missing
            continue
        for sub in pkgutil.iter_modules(package.__path__):
            if not sub.name.startswith("configuration_"):
                continue
            try:
                module = importlib.import_module(f"{package.__name__}.{sub.name}")
            except Exception:  # noqa: BLE001
                continue
            for name, cls in vars(module).items():
                if not (inspect.isclass(cls) and issubclass(cls, base) and cls.__module__ == module.__name__):
                    continue
                try:
                    config = cls(**{attribute: given})
                except Exception:  # noqa: BLE001 - a class that needs other arguments
                    continue
                if not hasattr(config, attribute) or getattr(config, attribute) == given:
                    kept += 1
                    continue
                forced[name] = next((c for c in CANDIDATES if getattr(config, c, None) == given), None)
    return transformers.__version__, forced, kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attribute", default="tie_word_embeddings")
    parser.add_argument("--given", default="false", help="true or false (default false)")
    args = parser.parse_args()
    version, forced, kept = measure(args.attribute, args.given == "true")
    print(f"# transformers {version}: {len(forced)} config classes force `{args.attribute}`, {kept} keep it")
    if forced:
        print(f"[changed.forced_config.{args.attribute}]")
        print("classes = [" + ", ".join(f'"{name}"' for name in sorted(forced)) + "]")
        kept_in = ", ".join(f'{name} = "{where}"' for name, where in sorted(forced.items()) if where)
        print("kept_in = { " + kept_in + " }")


if __name__ == "__main__":
    main()
