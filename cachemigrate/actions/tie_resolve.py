"""Following the ties of :mod:`.tie_sources` from an entry of a ``_tied_weights_keys`` list to the parameters it
names and to the source of each: the parameter at the end of the chain of ties."""

from __future__ import annotations


def resolve_split(ties: list, key: str) -> tuple[list, list, set[str], str | None]:
    """As :func:`resolve`, where a conditional tie (a module handed to a sub-model only when ``test`` holds) is
    followed both ways: ``(pairs when the tests are false, pairs when they are true, the tests, why not)``. When false,
    a target tied only under the test is not tied, and a chain stops before the conditional link."""
    off, why = resolve(ties, key, conditional=False)
    if why is not None:
        return [], [], set(), why
    tests: set[str] = set()
    on, why = resolve(ties, key, conditional=True, tests=tests)
    return off, on, tests, why


def resolve(
    ties: list, key: str, conditional: bool | None = None, tests: set | None = None
) -> tuple[list[tuple[str, str]], str | None]:
    """The ``(parameter, source)`` pairs of one list entry (4.x read it as a pattern searched in the full names:
    the ties whose target is ``key``, ends with ``.key``, or lies in the module ``key`` names), each source followed
    to a parameter that is not tied itself; or ``([], why not)``. A conditional tie is refused (``conditional`` None),
    read as absent (False) or followed, its test added to ``tests`` (True); one whose test cannot be read where the
    mapping is written is refused."""
    by_target: dict = {}
    for tie in ties:
        if tie.how != "untied":  # a class that never tied it: the ties of its sub-models, if any, are the ties
            by_target.setdefault(tie.target, tie)
    matched = [t for t in by_target if f".{key}." in f".{t}." or t.endswith("." + key)]  # a module names its own
    if not matched:  # the entry names what others are tied to (4.x lists both ends): the ties of those others
        matched = [t.target for t in by_target.values() if t.source == key or t.source.endswith("." + key)]
    if not matched:
        return [], "no code of the file ties it"
    pairs = []
    for target in matched:
        tie, seen = by_target[target], {target}
        while True:
            if tie.how in ("unproven", "raises"):
                return [], tie.why
            if tie.how == "conditional" and (conditional is None or not tie.test):
                return [], tie.why
            if tie.how == "conditional" and not conditional:  # not tied when the test is false
                break
            if tie.how == "conditional":
                tests.add(tie.test)
            if tie.how == "ungated":
                return [], (
                    f"{tie.why} ties `{tie.target}` whatever `config.tie_word_embeddings` says, and 5.x ties the "
                    "mapping only when it is true"
                )
            if tie.source not in by_target or tie.source in seen:
                break
            seen.add(tie.source)
            tie = by_target[tie.source]
        if tie.how == "conditional" and not conditional:
            if tie.target != target:  # the chain stops before the conditional link
                pairs.append((target, tie.target))
            continue
        pairs.append((target, tie.source))
    return pairs, None
