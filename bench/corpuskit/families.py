"""The family of each model folder, read from ``bench/corpus_families.toml`` (data, so that a family can be added
or a model moved without editing code)."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

TABLE = Path(__file__).resolve().parent.parent / "corpus_families.toml"
UNCLASSIFIED = "unclassified"


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    title: str
    decoder: bool
    models: frozenset[str]
    goal: str | None = None  # the goal of the report the family counts towards: "decoder-only", "encoder-decoder"


def load(path: Path = TABLE) -> dict[str, Family]:
    """Family name -> Family, in the file's order; a model listed twice is an error."""
    with path.open("rb") as handle:
        data = tomllib.load(handle)
    families: dict[str, Family] = {}
    seen: dict[str, str] = {}
    for name, entry in data.get("family", {}).items():
        models = frozenset(entry.get("models", []))
        for model in models:
            if model in seen:
                raise SystemExit(f"{path}: {model} is in both {seen[model]} and {name}")
            seen[model] = name
        decoder = bool(entry.get("decoder", False))
        goal = entry.get("goal", "decoder-only" if decoder else None)
        families[name] = Family(name, entry.get("title", name), decoder, models, goal)
    families[UNCLASSIFIED] = Family(UNCLASSIFIED, "not in bench/corpus_families.toml", False, frozenset())
    return families


def family_of(model: str, families: dict[str, Family]) -> str:
    for family in families.values():
        if model in family.models:
            return family.name
    return UNCLASSIFIED
