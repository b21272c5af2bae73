"""``[tool.cachemigrate]`` in the nearest pyproject.toml, the way black and ruff find theirs."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path
from typing import Any, Sequence

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ..rules.eras import available_eras
from ..rules.schema import TIERS
from ..source.walk import DEFAULT_EXCLUDE, DEFAULT_INCLUDE, Selection

KEYS = {
    "era": (str, 'an era name such as "4.52", or "auto"'),
    "tier": (str, f"one of {', '.join(TIERS)}"),
    "rules": (list, "a list of rule directories, relative to pyproject.toml"),
    "line-length": (int, "a positive integer"),
    "include": (list, 'a list of gitignore-style patterns, e.g. ["modeling_*.py"]'),
    "exclude": (list, 'a list of gitignore-style patterns, e.g. ["legacy/", "modeling_tf_*.py"]'),
    "extend-exclude": (list, "a list of gitignore-style patterns"),
    "force-exclude": (
        (list, bool),
        "true (apply the excludes to files named on the command line too) or a list "
        "of gitignore-style patterns (left out even when named)",
    ),
    "jobs": (int, "a positive integer"),
    "fix-past-hook": (bool, "true or false"),
}


class ConfigError(ValueError):
    pass


@dataclasses.dataclass
class Config:
    """``[tool.cachemigrate]`` of the project's pyproject.toml, with the defaults for what it does not set."""

    era: str = "auto"
    tier: str = "dynamic"
    rules: tuple[Path, ...] = ()
    line_length: int | None = None
    include: tuple[str, ...] = DEFAULT_INCLUDE
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    force_exclude: tuple[str, ...] = ()
    force_excludes: bool = False  # `force-exclude = true`: the excludes apply to named files too (--force-exclude)
    jobs: int = 1
    fix_past_hook: bool = False  # `fix-past-hook = true`: as --fix-past-hook
    source: Path | None = None

    def selection(self, include=(), exclude=(), extend_exclude=(), force_exclude=None) -> Selection:
        """Which files to take: each pattern list given on the command line replaces the configured one;
        ``force_exclude`` (the --force-exclude flag) True or False wins over the configuration's."""
        return Selection(
            tuple(include) or self.include,
            tuple(exclude) or self.exclude,
            tuple(extend_exclude) or self.extend_exclude,
            self.force_exclude,
            self.force_excludes if force_exclude is None else bool(force_exclude),
        )


def rules_dir_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a rules directory (one that holds ``<era>/*.toml`` or ``*.toml`` rule files), or
    None. Checked before any file is answered: a run answered from the cache must not ignore it."""
    if not path.exists():
        return "does not exist: expected a directory of rule files (<era>/CMxxx.toml or CMxxx.toml)"
    if not path.is_dir():
        return "is a file, not a directory: expected a directory of rule files (<era>/CMxxx.toml or CMxxx.toml)"
    return None


def find_pyproject(paths: Sequence[Path]) -> Path | None:
    """The pyproject.toml in the deepest common directory of ``paths`` or above it."""
    resolved = [Path(os.path.abspath(p)) for p in paths] or [Path.cwd()]  # a symlink belongs where it is
    start = Path(os.path.commonpath([str(p) for p in resolved]))
    if start.is_file():
        start = start.parent
    for directory in [start, *start.parents]:
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_config(pyproject: Path | None) -> Config:
    if pyproject is None:
        return Config()
    try:
        data = tomllib.loads(pyproject.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{pyproject}: not valid TOML: {exc}") from None
    tool = data.get("tool", {})
    section: dict[str, Any] = tool.get("cachemigrate", {})
    for key, value in section.items():
        if key not in KEYS:
            raise ConfigError(
                f"{pyproject}: [tool.cachemigrate] unknown key `{key}`: expected one of {', '.join(sorted(KEYS))}"
            )
        kind, expected = KEYS[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if (
            not isinstance(value, kinds)
            or (isinstance(value, bool) and bool not in kinds)
            or (isinstance(value, list) and not all(isinstance(item, str) for item in value))
            or (kind is int and value < 1)
        ):
            raise ConfigError(f"{pyproject}: [tool.cachemigrate] key `{key}`: expected {expected}; got {value!r}")
    if section.get("era", "auto") not in ("auto", *available_eras()):
        raise ConfigError(
            f"{pyproject}: [tool.cachemigrate] key `era`: unknown era {section['era']!r}: known eras are "
            f"{', '.join(available_eras())} (or auto)"
        )
    if "tier" in section and section["tier"] not in TIERS:
        raise ConfigError(
            f"{pyproject}: [tool.cachemigrate] key `tier`: expected {KEYS['tier'][1]}; got {section['tier']!r}"
        )
    line_length = section.get("line-length")
    for other in ("black", "ruff"):  # theirs, when ours is not set; taken only if it is a positive integer
        theirs = tool.get(other, {}).get("line-length") if isinstance(tool.get(other), dict) else None
        if line_length is None and isinstance(theirs, int) and not isinstance(theirs, bool) and theirs > 0:
            line_length = theirs
    base = pyproject.parent
    for directory in section.get("rules", []):
        problem = rules_dir_problem(base / directory)
        if problem:
            raise ConfigError(f"{pyproject}: [tool.cachemigrate] key `rules`: {directory!r} {problem}")
    return Config(
        era=section.get("era", "auto"),
        tier=section.get("tier", "dynamic"),
        rules=tuple(base / r for r in section.get("rules", [])),
        line_length=line_length,
        include=tuple(section.get("include", Config.include)),
        exclude=tuple(section.get("exclude", Config.exclude)),
        extend_exclude=tuple(section.get("extend-exclude", ())),
        force_exclude=tuple(force) if isinstance(force := section.get("force-exclude", ()), list) else (),
        force_excludes=force is True,
        jobs=section.get("jobs", 1),
        fix_past_hook=section.get("fix-past-hook", False),
        source=pyproject,
    )
