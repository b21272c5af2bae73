"""Rule files: loading and selection.

A rule set is a directory per API era (``rules/4.52/``) holding ``era.toml`` (the era's cache names and
facts) and one TOML file per rule. A rule names an *action* from :mod:`cachemigrate.actions`, the *role* and
functions it applies to, the lowest *tier* it belongs to, and the action's parameters. Everything is checked
when the file is loaded; a bad file raises :class:`RuleError` saying which file, which key and what is expected.
The schema itself lives in :mod:`cachemigrate.rules.schema`.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from ..actions import ACTIONS
from .eras import (
    BUILTIN_RULES,
    available_eras,
    era_for_installed,
    era_for_version,
    in_range,
)  # noqa: F401 (re-exported)
from ..facts.conversions import FILTER_WRITES
from ..views.patterns import TemplateError, compile_statements, filters_in
from .schema import (
    ENGINE_FACTS,
    ROLES,
    TIERS,
    Checker,
    Era,
    Fact,
    Removed,
    Rule,
    RuleError,
    RuleSet,
    Withdrawn,
    bound_names,
    line_of,
    read_toml,
)
from .vendor import check_helpers

_Checker = Checker  # the name the tests and user tooling knew
_ID = re.compile(r"^[A-Z]{2,4}\d{3}$")

__all__ = ["ROLES", "TIERS", "Era", "Fact", "Rule", "RuleError", "RuleSet", "load_ruleset", "available_eras"]


# --------------------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------------------

_RULE_KEYS = {
    "id", "name", "description", "era", "tier", "role", "functions", "action", "params", "order", "required",
    "when", "imports", "replaces", "explain", "helpers", "notice",
}  # fmt: skip


_ERA_KEYS = {
    "era", "runtime", "cache_names", "cache_module", "facts", "extends", "remove", "remove_because", "restore",
    "auto", "removed", "changed",
}  # fmt: skip


def load_era(path: Path, parent: Era | None = None) -> Era:
    """The era of ``path`` (an ``era.toml``). With ``extends``, ``parent`` is the era it names (loaded first): its
    cache names, cache module and facts are inherited unless this file sets them (a fact of the same name
    replaces the parent's)."""
    data = read_toml(path)
    check = Checker(path, data)
    check.unknown(_ERA_KEYS)
    extends = check.get("extends", str, "the name of the era this one inherits from", None)
    if (extends is None) != (parent is None) or (parent is not None and parent.name != extends):
        raise RuleError(
            f"{path}: `extends` names {extends!r}, but the era was loaded with parent {parent and parent.name!r}"
        )
    facts = {fact.name: fact for fact in (parent.facts if parent else ())}
    for name in check.get("facts", dict, "a table of facts", {}):
        prefix = f"facts.{name}"
        check.unknown({"role", "functions", "cases", "default"}, prefix)
        cases = check.get(f"{prefix}.cases", list, "a list of tables with `pattern` and `value` or `capture`")
        for index, case in enumerate(cases):
            if not isinstance(case, dict) or "pattern" not in case or not ({"value", "capture"} & set(case)):
                raise check.fail(f"{prefix}.cases", "tables with `pattern` and `value` or `capture`", case)
            try:
                pattern = compile_statements(case["pattern"])
            except TemplateError as exc:
                raise RuleError(f"{line_of(path, 'pattern')}: `{prefix}.cases[{index}].pattern`: {exc}") from None
            mentions = case.get("mentions", {})
            if not isinstance(mentions, dict) or not all(
                hole in pattern.holes() and isinstance(name, str) for hole, name in mentions.items()
            ):
                raise check.fail(f"{prefix}.cases", "`mentions` as a table of the pattern's hole = a name", case)
        facts[name] = Fact(
            name=name,
            role=check.choice(f"{prefix}.role", ROLES),
            functions=check.str_list(f"{prefix}.functions", ["forward"]),
            cases=tuple(cases),
            default=check.get(f"{prefix}.default", str, "a string", None),
        )
    check.unknown({"names", "imports", "methods", "config_defaults", "instead"}, "removed") if "removed" in data else None
    check.unknown({"forced_config"}, "changed") if "changed" in data else None
    inherited = parent is not None
    return Era(
        name=check.get("era", str, 'the era name as a string, e.g. "4.52"'),
        runtime=check.get("runtime", str, 'a version range string, e.g. ">=4.42,<4.54"'),
        cache_names=check.str_list("cache_names", parent.cache_names if inherited else dataclasses.MISSING),
        cache_module=check.get(
            "cache_module",
            str,
            'a module name, e.g. "cache_utils"',
            parent.cache_module if inherited else dataclasses.MISSING,
        ),
        facts=tuple(facts.values()),
        path=path,
        extends=extends,
        auto=check.get("auto", bool, "true or false", True),
        removed=Removed(*(check.str_list(f"removed.{key}", []) for key in ("names", "imports", "methods"))),
    )


def load_rule(path: Path, era: Era) -> Rule:
    data = read_toml(path)
    check = Checker(path, data)
    check.unknown(_RULE_KEYS)
    rule_id = check.get("id", str, 'an id like "CM001"')
    if not _ID.match(rule_id):
        raise check.fail("id", 'an id of 2-4 capital letters and 3 digits, like "CM001"', rule_id)
    action_name = check.choice("action", tuple(sorted(ACTIONS)))
    rule_era = check.get("era", str, f"the era of its directory, {era.name!r}")
    if rule_era != era.name:
        raise check.fail("era", f"the era of its directory, {era.name!r}", rule_era)
    known_facts = {f.name for f in era.facts} | set(ENGINE_FACTS)  # a value "*": the fact is known
    when = check.get("when", dict, "a table of fact = value", {})
    for fact, value in when.items():
        if fact not in known_facts or not isinstance(value, str):
            raise check.fail(
                f"when.{fact}", f"a fact of {era.path.name} ({', '.join(sorted(known_facts))}) = string", value
            )
    rule = Rule(
        id=rule_id,
        name=check.get("name", str, "a short kebab-case name"),
        description=check.get("description", str, "a one-line description"),
        era=rule_era,
        tier=check.choice("tier", TIERS),
        role=check.choice("role", ROLES),
        functions=check.str_list("functions", ["forward"]),
        action=action_name,
        params=check.get("params", dict, "a table of the action's parameters", {}),
        order=check.get("order", int, "an integer", 100),
        required=check.get("required", bool, "true or false", False),
        when=dict(when),
        imports=check.str_list("imports", []),
        replaces=check.str_list("replaces", []),
        explain=check.get("explain", str, "a sentence for users", ""),
        notice=check.get("notice", str, "a sentence for users", ""),
        path=path,
        helpers=check.str_list("helpers", []),
    )
    check_helpers(rule, check)
    check.bound_names = set(bound_names(era))
    ACTIONS[action_name].validate(rule, check)
    return rule


def load_ruleset(era: str, extra_dirs: tuple[Path, ...] = (), root: Path = BUILTIN_RULES) -> RuleSet:
    """The rules of one era: the built-in ones plus those in ``extra_dirs/<era>/`` (or ``extra_dirs`` itself
    when it holds rule files directly). A user rule with the id of a built-in one replaces it.

    An era that ``extends`` another starts from that era's rules (resolved the same way, recursively); its own
    rule files add rules or replace inherited ones by id, ``remove`` drops inherited ones, and ``restore`` brings
    back ones that an era in between removed. So a rule added to an ancestor reaches every era built on it; one
    whose code names an API the era's runtime lacks (``[removed] names``) is an error of the rule set."""
    chain = _era_chain(era, root)
    info: Era | None = None
    by_id: dict[str, Rule] = {}
    dropped: dict[str, Withdrawn] = {}
    for index, name in enumerate(chain):
        path = root / name / "era.toml"
        info = load_era(path, info)
        check = Checker(path, read_toml(path))
        because = check.get("remove_because", (str, dict), "a string, or a table of one per rule id: why the era "
                            "removes the rules of `remove`", "")  # fmt: skip
        for rule_id in check.str_list("remove", []):
            if rule_id not in by_id:
                raise check.fail("remove", f"ids of rules that {info.extends!r} has", rule_id)
            why = because.get(rule_id) if isinstance(because, dict) else because
            if not isinstance(why, str):
                raise check.fail(f"remove_because.{rule_id}", "a string: why the era removes the rule", why)
            dropped[rule_id] = Withdrawn(by_id.pop(rule_id), info.name, why)
        for rule_id in check.str_list("restore", []):
            if rule_id not in dropped:
                raise check.fail("restore", "ids of rules that an era this one extends removed", rule_id)
            by_id[rule_id] = dropped.pop(rule_id).rule
        last = index == len(chain) - 1
        by_id.update(_rules_of(info, root / name, extra_dirs, flat_dirs=last))
    _check_removed(by_id.values(), info)
    withdrawn = tuple(w for rule_id, w in sorted(dropped.items()) if rule_id not in by_id)  # not replaced after
    return RuleSet(info, tuple(sorted(by_id.values(), key=lambda r: (r.order, r.id))), withdrawn)


def _era_chain(era: str, root: Path) -> list[str]:
    """``era`` and the eras it extends, the oldest first."""
    chain: list[str] = []
    name: str | None = era
    while name is not None:
        era_dir = root / name
        if not (era_dir / "era.toml").is_file():
            known = ", ".join(available_eras(root)) or "none"
            if chain:
                raise RuleError(
                    f"{root / chain[-1] / 'era.toml'}: `extends` names unknown era {name!r}; known: {known}"
                )
            raise RuleError(f"unknown era {era!r}: no {era_dir}/era.toml; known eras: {known}")
        if name in chain:
            raise RuleError(f"{era_dir / 'era.toml'}: `extends` makes a cycle: {' -> '.join([*chain, name])}")
        chain.append(name)
        extends = read_toml(era_dir / "era.toml").get("extends")
        name = extends if isinstance(extends, str) else None
    return chain[::-1]


def _rules_of(era: Era, era_dir: Path, extra_dirs: tuple[Path, ...], flat_dirs: bool) -> dict[str, Rule]:
    """The rules defined for ``era`` itself: its built-in directory, then each extra directory's ``<era>/`` folder
    (or, for the era asked for, the extra directory itself when it has no such folder)."""
    by_id: dict[str, Rule] = {}
    for directory in (era_dir, *extra_dirs):
        directory = Path(directory)
        if not directory.is_dir():
            raise RuleError(f"{directory}: rules directory does not exist")
        if (directory / era.name).is_dir():
            directory = directory / era.name
        elif directory != era_dir and not flat_dirs:
            continue
        for path in sorted(directory.glob("*.toml")):
            if path.name == "era.toml":
                continue
            rule = load_rule(path, era)
            if rule.id in by_id and by_id[rule.id].path.parent == path.parent:
                raise RuleError(f"{path}: key `id`: {rule.id} is also used by {by_id[rule.id].path}")
            by_id[rule.id] = rule
    return by_id


_INPUT_PARAMS = {"pattern", "patterns", "only_before", "old"}  # what a rule matches, not what it writes


def removed_names_written(rule: Rule, era: Era) -> list[str]:
    """The names the era's runtime no longer has (``[removed] names``) that the code of ``rule`` writes."""
    if not era.removed.names:
        return []
    found = re.compile(r"\b(" + "|".join(map(re.escape, era.removed.names)) + r")\b")
    written = [v for k, v in rule.params.items() if k not in _INPUT_PARAMS]
    texts = _strings(written)
    # a filter (`{presents|cache_to_legacy}`) writes its own code
    texts += [name for text in texts for f in filters_in(text) for name in FILTER_WRITES.get(f, ())]
    return list(dict.fromkeys(hit.group(1) for text in texts + list(rule.imports) for hit in found.finditer(text)))


def _check_removed(rules, era: Era) -> None:
    """No rule of the set writes a name that the era's runtime no longer has."""
    for rule in rules:
        names = removed_names_written(rule, era)
        if names:
            raise RuleError(
                f"{rule.path}: rule {rule.id} ({rule.name}) of era {rule.era} writes `{names[0]}`, which the "
                f"runtime of era {era.name} (transformers {era.runtime}) no longer has: add "
                f"rules/{era.name}/{rule.id}.toml replacing it, or list {rule.id} in `remove` of "
                f"rules/{era.name}/era.toml"
            )


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [text for item in value for text in _strings(item)]
    if isinstance(value, dict):
        return _strings(list(value.values()))
    return []
