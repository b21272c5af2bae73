"""Where the built-in rule sets are, which eras exist, and the few facts of an era that are needed before any rule
is loaded (its runtime range, its cache names): read with tomllib alone, so that choosing the era and the text
prefilter never import libcst. The full era (its facts, checked) is :func:`cachemigrate.rules.loader.load_era`.
"""

from __future__ import annotations

import functools
import hashlib
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# installed (a wheel): cachemigrate/builtin_rules/; a checkout or an editable install: rules/ beside the package
_PACKAGED_RULES = Path(__file__).resolve().parents[1] / "builtin_rules"
BUILTIN_RULES = _PACKAGED_RULES if _PACKAGED_RULES.is_dir() else Path(__file__).resolve().parents[2] / "rules"


def available_eras(root: Path = BUILTIN_RULES) -> list[str]:
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "era.toml").is_file())


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def in_range(version: str, spec: str) -> bool:
    """``">=4.42,<4.54"`` style ranges (only >=, >, <, <=, ==)."""
    current = _version_tuple(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        op, bound = re.match(r"(>=|<=|==|>|<)\s*(.+)", clause).groups()
        other = _version_tuple(bound)
        width = max(len(current), len(other))
        a = current + (0,) * (width - len(current))
        b = other + (0,) * (width - len(other))
        ok = {">=": a >= b, "<=": a <= b, "==": a == b, ">": a > b, "<": a < b}[op]
        if not ok:
            return False
    return True


@functools.lru_cache(maxsize=None)
def _era_table(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}  # reported properly when the rule set is loaded


def runtime_of(era: str, root: Path = BUILTIN_RULES) -> str:
    value = _era_table(root / era / "era.toml").get("runtime")
    return value if isinstance(value, str) else ""


def lineage(era: str, root: Path = BUILTIN_RULES) -> list[str]:
    """The era and the eras it extends (``extends`` in its era.toml), nearest first."""
    chain = [era]
    while True:
        parent = _era_table(root / chain[-1] / "era.toml").get("extends")
        if not isinstance(parent, str) or parent in chain:
            return chain
        chain.append(parent)


def cache_names(era: str, root: Path = BUILTIN_RULES) -> tuple[str, ...]:
    """The parameter names that carry a KV cache in legacy code of this era (``layer_past``, ``past``...): its
    own, else those of the era it extends."""
    for name in lineage(era, root):
        value = _era_table(root / name / "era.toml").get("cache_names")
        if isinstance(value, list):
            return tuple(item for item in value if isinstance(item, str))
    return ()


def config_defaults(era: str, root: Path = BUILTIN_RULES) -> tuple[dict[str, str], str]:
    """``[removed] config_defaults`` of the era or the nearest era it extends that has them (config attributes the
    runtime no longer sets by default, each with the default 4.x set, as source text), and the runtime range of the
    era that says so."""
    for name in lineage(era, root):
        removed = _era_table(root / name / "era.toml").get("removed", {})
        value = removed.get("config_defaults") if isinstance(removed, dict) else None
        if isinstance(value, dict):
            return {key: item for key, item in value.items() if isinstance(item, str)}, runtime_of(name, root)
    return {}, ""


def forced_config(era: str, root: Path = BUILTIN_RULES) -> tuple[dict[str, dict], str]:
    """``[changed.forced_config]`` of the era or the nearest era it extends that has it (a config attribute ->
    ``{"value": ..., "classes": [...], "kept_in": {class: attribute}}``: transformers' config classes that set the
    attribute whatever they are given), and the runtime range of the era that says so."""
    for name in lineage(era, root):
        changed = _era_table(root / name / "era.toml").get("changed", {})
        value = changed.get("forced_config") if isinstance(changed, dict) else None
        if isinstance(value, dict):
            return {key: item for key, item in value.items() if isinstance(item, dict)}, runtime_of(name, root)
    return {}, ""


def removed_imports(era: str, root: Path = BUILTIN_RULES) -> tuple[str, ...]:
    """``[removed] imports`` of the era or the nearest era it extends that lists them."""
    for name in lineage(era, root):
        removed = _era_table(root / name / "era.toml").get("removed", {})
        value = removed.get("imports") if isinstance(removed, dict) else None
        if isinstance(value, list):
            return tuple(item for item in value if isinstance(item, str))
    return ()


def removed_entry(source: str, name: str, removed: tuple[str, ...]) -> str | None:
    """The ``[removed] imports`` entry (``module`` or ``module:Name``, relative to transformers) that an import of
    ``name`` (or of the module itself: "") from ``source`` falls under, else None."""
    for entry in removed:
        gone, _, gone_name = entry.partition(":")
        if source == gone or source.startswith(gone + "."):
            if not gone_name or gone_name == name:
                return entry
    return None


def era_for_version(version: str | None, root: Path = BUILTIN_RULES) -> str:
    """The era whose runtime range holds transformers ``version``; for a version outside every range, the newest
    era whose range starts below it, else the oldest. A portable target (``auto = false``) is only chosen by name,
    or for an unknown runtime (``version`` None): see :func:`era_for_unknown_runtime`."""
    from .schema import RuleError

    if not version:
        return era_for_unknown_runtime(root)
    tables = {era: _era_table(root / era / "era.toml") for era in available_eras(root)}
    eras = sorted((e for e, t in tables.items() if t.get("auto", True) is not False), key=_version_tuple)
    if not eras:
        raise RuleError(f"no rule sets found under {root}")
    runtimes = {era: runtime_of(era, root) for era in eras}
    for era in eras:
        if runtimes[era] and in_range(version, runtimes[era]):
            return era
    below = [era for era in eras if in_range(version, ",".join(c for c in runtimes[era].split(",") if ">" in c))]
    return below[-1] if below else eras[0]


def _lower_bound(runtime: str) -> tuple[int, ...] | None:
    """The release a runtime range starts at; None when it has an upper bound (code for it may break later
    releases) or no lower one."""
    clauses = [c.strip() for c in runtime.split(",") if c.strip()]
    if not clauses or any(c.startswith("<") or c.startswith("==") for c in clauses):
        return None
    starts = [_version_tuple(c) for c in clauses if c.startswith(">")]
    return max(starts) if starts else None


def era_for_unknown_runtime(root: Path = BUILTIN_RULES) -> str:
    """The era to target when the runtime is unknown (no transformers installed, as in a pre-commit hook's
    virtualenv): the one whose code runs on the most releases, i.e. whose runtime range has no upper bound and
    starts earliest (the portable target). A target that may break the user's runtime is never guessed."""
    from .schema import RuleError

    starts = {era: _lower_bound(runtime_of(era, root)) for era in available_eras(root)}
    open_ended = sorted((start, era) for era, start in starts.items() if start is not None)
    if not open_ended:
        raise RuleError(f"no rule set under {root} has a runtime range without an upper bound")
    return open_ended[0][1]


def era_for_installed(root: Path = BUILTIN_RULES) -> tuple[str, str | None]:
    """The era for the installed transformers (read from package metadata, never imported): see
    :func:`era_for_version`. Returns (era, installed version or None)."""
    from importlib import metadata

    try:
        version = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        version = None
    return era_for_version(version, root), version


def rule_files(era: str, extra_dirs: tuple[Path, ...] = (), root: Path = BUILTIN_RULES) -> list[Path]:
    """Every file the rule set of ``era`` is loaded from (as :func:`cachemigrate.rules.loader.load_ruleset` finds
    them): the directories of the eras it extends and its own, the vendored helpers, then for each extra directory
    its folder of each of those eras (or, for the era asked for, the directory itself when it has no such folder)
    with the ``vendor/`` helpers beside it (:func:`cachemigrate.rules.vendor.vendor_file`)."""
    chain = list(reversed(lineage(era, root)))
    files = [path for name in chain for path in sorted((root / name).glob("*.toml"))]
    files += sorted((root / "vendor").glob("*.py"))  # helpers the rules copy into migrated files
    for directory in map(Path, extra_dirs):
        folders = [directory / name for name in chain if (directory / name).is_dir()]
        if not (directory / era).is_dir():
            folders.append(directory)
        for folder in folders:
            files.extend(sorted(folder.glob("*.toml")))
            files.extend(sorted((folder.resolve().parent / "vendor").glob("*.py")))
    return list(dict.fromkeys(files))


def fingerprint(era: str, extra_dirs: tuple[Path, ...] = (), root: Path = BUILTIN_RULES) -> str:
    """A digest of the bytes of every rule file of the rule set (and of their names): what the rules say."""
    digest = hashlib.sha256()
    for path in rule_files(era, extra_dirs, root):
        digest.update(path.name.encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"<unreadable>")
        digest.update(b"\0")
    return digest.hexdigest()
