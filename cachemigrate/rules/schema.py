"""The rule schema: what an era file and a rule file hold, and how their keys are checked.

This is the one home of the schema. The loader (:mod:`cachemigrate.rules.loader`) and the actions (which validate their
own ``params``) both use it; neither imports the other through it.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import Any, Mapping

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TIERS = ("dynamic", "static", "upstream")
# Facts the engine computes itself (cachemigrate.facts.boundary): the layout of the cached keys and values inside the
# attention and at the model boundary. Usable in `when` and as bound holes like the era's own facts.
ENGINE_FACTS = (
    "form",
    "cache_layout",
    "boundary",
    "key_seq",
    "value_seq",
    "boundary_key_seq",
    "stored_key_seq",
    "entry_converter",
    "exit_converter",
    "past_projection",
)
ROLES = (
    "attention",
    "block",
    "base_model",
    "pretrained",
    "head",
    "library_head",
    "library_model",
    "library_stack",
    "library_seq2seq",
    "stacked_reorder",
    "reader",
    "consumer",
    "patch",
    "any",
)


class RuleError(ValueError):
    """A rule or era file is malformed."""


@dataclasses.dataclass(frozen=True)
class Fact:
    """A value read off the file being migrated, usable as a bound ``{hole}`` and in ``when``.

    Each case is a statement pattern searched in the role's functions; the first that matches gives the fact's
    value: its ``value`` if set, else the code captured by the hole named ``capture``. A case's ``mentions``
    (hole = name) asks that the code a hole captures reads that name."""

    name: str
    role: str
    functions: tuple[str, ...]
    cases: tuple[Mapping[str, Any], ...]
    default: str | None


@dataclasses.dataclass(frozen=True)
class Removed:
    """What an era's runtime no longer has (``[removed]`` of ``era.toml``): code a rule inserts must not name one
    of ``names``; a migrated file that still imports one of ``imports`` (``module`` or ``module:Name``, relative to
    transformers) or calls ``self.<method>`` for one of ``methods`` that the file does not define would not run."""

    names: tuple[str, ...] = ()
    imports: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Era:
    """An era's ``era.toml``: its runtime range, cache names and module, facts, and what its runtime removed."""

    name: str
    runtime: str
    cache_names: tuple[str, ...]
    cache_module: str
    facts: tuple[Fact, ...]
    path: Path
    extends: str | None = None  # the era whose rules, facts and names this one inherits
    auto: bool = True  # whether ``--era auto`` may choose it (a portable target is chosen by name)
    removed: Removed = Removed()


@dataclasses.dataclass(frozen=True)
class Rule:
    """A rule file: the action it names, where it applies (role, functions, tier, ``when``) and the parameters."""

    id: str
    name: str
    description: str
    era: str
    tier: str
    role: str
    functions: tuple[str, ...]
    action: str
    params: Mapping[str, Any]
    order: int = 100
    required: bool = False
    when: Mapping[str, str] = dataclasses.field(default_factory=dict)
    imports: tuple[str, ...] = ()
    replaces: tuple[str, ...] = ()
    explain: str = ""  # said when a required rule finds nothing: what prevents it and what to do
    notice: str = ""  # said where the rule applied, as a note (the file still migrates): why code a reviewer misses
    path: Path | None = None
    helpers: tuple[str, ...] = ()  # ``module:name`` definitions of ``rules/vendor/`` the rule's code uses

    def in_tier(self, tier: str) -> bool:
        return TIERS.index(self.tier) <= TIERS.index(tier)


@dataclasses.dataclass(frozen=True)
class Withdrawn:
    """A rule of an ancestor era that an era of the chain removed (``remove`` of its era.toml), and why."""

    rule: Rule
    era: str  # the era that removed it
    because: str  # ``remove_because`` of that era.toml ("" when it says nothing)


@dataclasses.dataclass(frozen=True)
class RuleSet:
    """The rules of one era (its own and those it inherits), in the order they are planned."""

    era: Era
    rules: tuple[Rule, ...]
    withdrawn: tuple[Withdrawn, ...] = ()  # for the diagnostics: what an ancestor era would have rewritten

    def for_tier(self, tier: str) -> list[Rule]:
        if tier not in TIERS:
            raise RuleError(f"unknown tier {tier!r}: expected one of {', '.join(TIERS)}")
        chosen = [r for r in self.rules if r.in_tier(tier)]
        replaced = {old for r in chosen for old in r.replaces}
        return sorted((r for r in chosen if r.id not in replaced), key=lambda r: (r.order, r.id))


def line_of(path: Path, key: str) -> str:
    """``path:line`` of the first ``key =`` in a TOML file, for error messages."""
    last = key.split(".")[-1]
    try:
        for number, text in enumerate(path.read_text().splitlines(), 1):
            if re.match(rf"\s*{re.escape(last)}\s*=", text) or text.strip() == f"[{key}]":
                return f"{path}:{number}"
    except OSError:
        pass
    return str(path)


class Checker:
    """Typed access to the keys of one TOML file; every failure names the file, line, key and what was expected.

    ``bound_names`` are the holes a template may use without capturing them (set by the loader: ``cache``,
    ``layers``, the era's facts, ``arg0``...)."""

    def __init__(self, path: Path, data: Mapping[str, Any], bound_names: frozenset[str] = frozenset()) -> None:
        self.path = path
        self.data = data
        self.bound_names = set(bound_names)

    def fail(self, key: str, expected: str, got: Any = dataclasses.MISSING) -> RuleError:
        where = line_of(self.path, key)
        got_text = "it is missing" if got is dataclasses.MISSING else f"got {got!r}"
        return RuleError(f"{where}: key `{key}`: expected {expected}; {got_text}")

    def get(self, key: str, kind: type | tuple, expected: str, default: Any = dataclasses.MISSING) -> Any:
        value: Any = self.data
        for part in key.split("."):
            if not isinstance(value, Mapping) or part not in value:
                if default is not dataclasses.MISSING:
                    return default
                raise self.fail(key, expected)
            value = value[part]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.fail(key, expected, value)
        return value

    def str_list(self, key: str, default: Any = dataclasses.MISSING) -> tuple[str, ...]:
        value = self.get(key, list, "a list of strings", default)
        if not all(isinstance(v, str) for v in value):
            raise self.fail(key, "a list of strings", value)
        return tuple(value)

    def choice(self, key: str, choices: tuple[str, ...], default: Any = dataclasses.MISSING) -> str:
        value = self.get(key, str, f"one of {', '.join(choices)}", default)
        if value not in choices:
            raise self.fail(key, f"one of {', '.join(choices)}", value)
        return value

    def unknown(self, allowed: set[str], prefix: str = "") -> None:
        table = self.data if not prefix else self.get(prefix, dict, "a table")
        for key in table:
            if key not in allowed:
                full = f"{prefix}.{key}" if prefix else key
                raise RuleError(
                    f"{line_of(self.path, full)}: unknown key `{full}`: expected one of {', '.join(sorted(allowed))}"
                )


def read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise RuleError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise RuleError(f"{path}: cannot read: {exc.strerror}") from None


def bound_names(era: Era) -> frozenset[str]:
    """Holes a rule of ``era`` may use unbound by its pattern: the cache, the layer list, facts, arguments, the name
    of the function's ``**kwargs``."""
    facts = (*(f.name for f in era.facts), *ENGINE_FACTS)
    return frozenset(
        {"cache", "layers", "var_kwargs", "outputs", "library_model", "handed_use_cache", *facts, *(f"arg{i}" for i in range(10))}
    )
