"""Rule files: loading and selection.

A rule set is a directory per API era (``rules/4.52/``) holding ``era.toml`` (the era's cache names and
facts) and one TOML file per rule. A rule names an *action* from :mod:`cachemigrate.actions`, the *role* and
functions it applies to, the lowest *tier* it belongs to, and the action's parameters. Everything is checked
when the file is loaded; a bad file raises :class:`RuleError` saying which file, which key and what is expected.
The schema itself lives in :mod:`cachemigrate.schema`.
"""

from __future__ import annotations

import re
from pathlib import Path

from .actions import ACTIONS
from .eras import BUILTIN_RULES, available_eras, era_for_installed, in_range  # noqa: F401 (re-exported)
from .patterns import TemplateError, compile_statements
from .schema import ROLES, TIERS, Checker, Era, Fact, Rule, RuleError, RuleSet, bound_names, line_of, read_toml

_Checker = Checker  # the name the tests and user tooling knew
_ID = re.compile(r"^[A-Z]{2,4}\d{3}$")

__all__ = ["ROLES", "TIERS", "Era", "Fact", "Rule", "RuleError", "RuleSet", "load_ruleset", "available_eras"]


# --------------------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------------------

_RULE_KEYS = {
    "id", "name", "description", "era", "tier", "role", "functions", "action", "params", "order", "required",
    "when", "imports", "replaces", "explain",
}  # fmt: skip


def load_era(path: Path) -> Era:
    data = read_toml(path)
    check = Checker(path, data)
    check.unknown({"era", "runtime", "cache_names", "cache_module", "facts"})
    facts = []
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
        facts.append(
            Fact(
                name=name,
                role=check.choice(f"{prefix}.role", ROLES),
                functions=check.str_list(f"{prefix}.functions", ["forward"]),
                cases=tuple(cases),
                default=check.get(f"{prefix}.default", str, "a string", None),
            )
        )
    return Era(
        name=check.get("era", str, 'the era name as a string, e.g. "4.52"'),
        runtime=check.get("runtime", str, 'a version range string, e.g. ">=4.42,<4.54"'),
        cache_names=check.str_list("cache_names"),
        cache_module=check.get("cache_module", str, 'a module name, e.g. "cache_utils"'),
        facts=tuple(facts),
        path=path,
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
    known_facts = {f.name for f in era.facts}
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
        path=path,
    )
    check.bound_names = set(bound_names(era))
    ACTIONS[action_name].validate(rule, check)
    return rule


def load_ruleset(era: str, extra_dirs: tuple[Path, ...] = (), root: Path = BUILTIN_RULES) -> RuleSet:
    """The rules of one era: the built-in ones plus those in ``extra_dirs/<era>/`` (or ``extra_dirs`` itself
    when it holds rule files directly). A user rule with the id of a built-in one replaces it."""
    era_dir = root / era
    if not (era_dir / "era.toml").is_file():
        known = sorted(p.name for p in root.iterdir() if (p / "era.toml").is_file()) if root.is_dir() else []
        raise RuleError(f"unknown era {era!r}: no {era_dir}/era.toml; known eras: {', '.join(known) or 'none'}")
    era_info = load_era(era_dir / "era.toml")
    by_id: dict[str, Rule] = {}
    for directory in (era_dir, *extra_dirs):
        directory = Path(directory)
        if not directory.is_dir():
            raise RuleError(f"{directory}: rules directory does not exist")
        if (directory / era).is_dir():
            directory = directory / era
        for path in sorted(directory.glob("*.toml")):
            if path.name == "era.toml":
                continue
            rule = load_rule(path, era_info)
            if rule.id in by_id and by_id[rule.id].path.parent == path.parent:
                raise RuleError(f"{path}: key `id`: {rule.id} is also used by {by_id[rule.id].path}")
            by_id[rule.id] = rule
    return RuleSet(era_info, tuple(sorted(by_id.values(), key=lambda r: (r.order, r.id))))
