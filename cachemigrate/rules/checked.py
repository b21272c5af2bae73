"""Which rule sets are known to load: their rule files are checked once, not on every run.

Loading a rule set (:func:`cachemigrate.rules.loader.load_ruleset`) checks every rule file: its keys, its action's
parameters, that its templates parse (with libcst). A run checks its rule set before it answers any file, so that a
bad rule file is exit 2 before anything is written, unless a record says that these very rule files, with this very
tool, loaded before: then the rules are loaded only when a file needs the engine, and a run whose files are all
clean or cached never imports libcst. The record's key is the tool's version and code, the era, the folders given
with ``--rules`` and the names and bytes of every file the rule set reads (:func:`cachemigrate.rules.eras.rule_files`):
a changed rule file, user or built-in, is checked again.

Two records:

* the package's own, ``checked.json`` beside this module: written when the wheel is built (``setup.py`` runs
  ``python -m cachemigrate.rules.checked`` on the built package), it lists the key of every built-in era. So an
  installed package never checks its built-in rules at run time, not even on the first run after the install. A
  checkout or an editable install has none;
* the user's, one empty file per key in ``checked-rules/`` of the cache folder (``$CACHEMIGRATE_CACHE_DIR``...),
  written after a rule set loaded: the rule sets with ``--rules`` folders, and the built-in ones of a checkout.
  It records what the rule files are, not a result, so ``--no-cache`` reads and writes it too; only an empty
  ``CACHEMIGRATE_CACHE_DIR`` turns it off (every run then checks its rules first).

Nothing here imports libcst.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from pathlib import Path

from .. import __version__
from .eras import BUILTIN_RULES, available_eras, fingerprint

PACKAGE = Path(__file__).resolve().parents[1]  # the whole package: any change of the tool's code
BUILT = Path(__file__).resolve().with_name("checked.json")  # the package's own record, written by the build
FOLDER = "checked-rules"  # the user's record, in the cache folder
KEEP = 32  # the user's record keeps the most recent keys


@functools.lru_cache(maxsize=None)
def code_fingerprint(package: Path = PACKAGE) -> str:
    """A digest of the tool's own Python code (with the vendored helpers of an installed package)."""
    digest = hashlib.sha256(__version__.encode())
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def rules_key(era: str, rule_dirs: tuple[Path, ...] = (), root: Path = BUILTIN_RULES) -> str:
    """What a record of the rule set of ``era`` (with ``rule_dirs``) says loaded: see the module's docstring."""
    parts = {
        "version": __version__,
        "code": code_fingerprint(),
        "era": era,
        "dirs": [str(Path(d).resolve()) for d in rule_dirs],
        "rules": fingerprint(era, tuple(rule_dirs), root),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def _built_keys(record: Path = BUILT) -> frozenset[str]:
    try:
        keys = json.loads(record.read_text(encoding="utf-8")).get("keys", [])
        return frozenset(key for key in keys if isinstance(key, str))
    except (OSError, ValueError, AttributeError):
        return frozenset()


class CheckedRules:
    """The records of the rule sets that loaded; ``folder`` is the user's (None: only the package's is read)."""

    def __init__(self, folder: Path | None, built: Path = BUILT) -> None:
        self.folder = None if folder is None else Path(folder) / FOLDER
        self.built = built

    def known(self, era: str, rule_dirs: tuple[Path, ...], root: Path = BUILTIN_RULES) -> bool:
        """The rule files of this rule set loaded without an error once (built, or in an earlier run)."""
        key = rules_key(era, rule_dirs, root)
        if not rule_dirs and key in _built_keys(self.built):
            return True
        return self.folder is not None and (self.folder / key).is_file()

    def remember(self, era: str, rule_dirs: tuple[Path, ...], root: Path = BUILTIN_RULES) -> None:
        """Record that the rule set just loaded (best effort: a folder that cannot be written is no record)."""
        if self.folder is None or (not rule_dirs and self.known(era, rule_dirs, root)):
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            (self.folder / rules_key(era, rule_dirs, root)).touch()
            records = sorted(self.folder.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
            for old in records[KEEP:]:
                old.unlink()
        except OSError:
            pass


def write_built_record(record: Path = BUILT, root: Path = BUILTIN_RULES) -> list[str]:
    """Load and check every built-in era of this package and write ``record`` with their keys; a rule file that does
    not load raises its :class:`~cachemigrate.rules.schema.RuleError` and nothing is written. Returns the eras."""
    from .loader import load_ruleset

    eras = available_eras(root)
    for era in eras:
        load_ruleset(era, root=root)
    keys = [rules_key(era, root=root) for era in eras]
    record.write_text(json.dumps({"eras": eras, "keys": keys}, indent=1) + "\n", encoding="utf-8")
    return eras


def main() -> int:
    """``python -m cachemigrate.rules.checked``, run by the build on the package it built: exit 0 (the record is
    written), 1 (a built-in rule file does not load: the message says which and why) or 3 (libcst cannot be
    imported here: no record; an install then checks its rules on its first run)."""
    try:
        import libcst  # noqa: F401
    except ImportError as exc:
        sys.stderr.write(f"cachemigrate: the built-in rules cannot be checked here ({exc}): no record written\n")
        return 3
    from .schema import RuleError

    try:
        eras = write_built_record()
    except RuleError as exc:
        sys.stderr.write(f"cachemigrate: a built-in rule file does not load: {exc}\n")
        return 1
    sys.stderr.write(f"cachemigrate: built-in rules checked ({', '.join(eras)}): {os.path.relpath(BUILT)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
