"""Which files a run takes: the files named on the command line, and the ``include`` files found in the directories
named there, minus what the project would never want rewritten.

A directory walk never enters hidden folders (``.git``, ``.venv``, ``.tox``...), ``__pycache__``,
``node_modules``, ``site-packages``/``dist-packages``, or any folder holding ``pyvenv.cfg`` or ``conda-meta``
(a virtualenv or conda env, whatever its name), and skips what the ``.gitignore`` files of the project ignore.
Symlinked folders are not followed; a symlinked file is taken when its target is inside the walked folder. What a
walk passes over that a user may have expected it to take is told to ``skipped`` (see :class:`Skipped`): a symlink
loop or an entry that cannot be read (the walk goes on), and a modeling file that is a symlink out of the folder.

``include``, ``exclude``, ``extend-exclude`` and ``force-exclude`` are gitignore-style patterns (the syntax of
``.gitignore``: ``modeling_*.py`` matches that name in any folder, ``/gen/`` only the folder ``gen`` at the
root, ``legacy/`` any folder ``legacy``) matched against the path relative to the project root: the nearest
folder above the paths that holds ``.git``, ``.hg`` or ``pyproject.toml``. A file named on the command line is
always taken, unless a ``force-exclude`` pattern matches it, or ``--force-exclude`` (``force-exclude = true``) is
given and an ``exclude``/``extend-exclude`` pattern matches it: pre-commit names every file, as for black and ruff. A folder
named on the command line is searched even if it is itself ignored or excluded; the patterns then apply below it.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path
from typing import Iterator, Sequence

from pathspec import GitIgnoreSpec

DEFAULT_INCLUDE = ("modeling_*.py",)
DEFAULT_EXCLUDE = ("modeling_tf_*.py", "modeling_flax_*.py")  # TensorFlow and Flax models have no torch cache
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "dist-packages"})
ENV_MARKERS = ("pyvenv.cfg", "conda-meta")
ROOT_MARKERS = (".git", ".hg", "pyproject.toml")


@dataclasses.dataclass(frozen=True)
class Selection:
    """Which files a walk takes: the include and exclude patterns, and how named files are excluded."""

    include: tuple[str, ...] = DEFAULT_INCLUDE
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE  # replaces the default; extend_exclude adds to it
    extend_exclude: tuple[str, ...] = ()
    force_exclude: tuple[str, ...] = ()
    force_excludes: bool = False  # --force-exclude: exclude and extend-exclude apply to named files too


class PatternError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Skipped:
    """An entry a walk passed over: ``problem`` True for one it could not look at (a symlink loop), False for one
    it left out on purpose (a symlink to a file outside the walked folder)."""

    path: Path
    why: str
    problem: bool

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


def _spec(patterns: Sequence[str], what: str) -> GitIgnoreSpec:
    try:
        return GitIgnoreSpec.from_lines(list(patterns))
    except Exception as exc:  # pathspec raises its own error types per version
        raise PatternError(f"{what}: bad pattern in {list(patterns)!r}: {exc}") from None


@functools.lru_cache(maxsize=None)
def _gitignore(directory: Path) -> GitIgnoreSpec | None:
    path = directory / ".gitignore"
    if not path.is_file():
        return None
    with open(path, encoding="utf-8-sig", errors="replace") as stream:  # like git, skip a BOM
        return _spec(stream.read().splitlines(), str(path))


def find_root(paths: Sequence[Path]) -> Path:
    """The project root: the nearest folder above (or at) the common folder of ``paths`` holding ``.git``, ``.hg``
    or ``pyproject.toml``; else that common folder."""
    resolved = [Path(os.path.abspath(p)) for p in paths] or [Path.cwd()]
    start = Path(os.path.commonpath([str(p) for p in resolved]))
    if not start.is_dir():
        start = start.parent
    for folder in (start, *start.parents):
        if any((folder / marker).exists() for marker in ROOT_MARKERS):
            return folder
    return start


def _relative(path: Path, base: Path, is_dir: bool) -> str:
    text = path.relative_to(base).as_posix()
    return text + "/" if is_dir and text != "." else text


@dataclasses.dataclass(frozen=True)
class _Matcher:
    """Patterns and .gitignore files, relative to one base folder (the project root, or a folder named on the
    command line that the project ignores)."""

    base: Path
    include: GitIgnoreSpec
    exclude: GitIgnoreSpec
    force: GitIgnoreSpec
    gitignores: dict  # folder -> the spec of its .gitignore, from the base down

    @classmethod
    def make(cls, base: Path, selection: Selection, gitignores: dict[Path, GitIgnoreSpec]) -> "_Matcher":
        return cls(
            base,
            _spec(selection.include, "include"),
            _spec((*selection.exclude, *selection.extend_exclude), "exclude"),
            _spec(selection.force_exclude, "force-exclude"),
            gitignores,
        )

    def ignored(self, path: Path, is_dir: bool) -> bool:
        relative = _relative(path, self.base, is_dir)
        if self.exclude.match_file(relative) or self.force.match_file(relative):
            return True
        for folder, spec in self.gitignores.items():
            if folder == path or folder not in path.parents:
                continue
            if spec.match_file(_relative(path, folder, is_dir)):
                return True
        return False

    def with_gitignore_of(self, folder: Path) -> "_Matcher":
        spec = _gitignore(folder)
        return self if spec is None else dataclasses.replace(self, gitignores={**self.gitignores, folder: spec})


def _is_environment(folder: Path) -> bool:
    return any((folder / marker).exists() for marker in ENV_MARKERS)


def _walk(folder: Path, matcher: _Matcher, inside: Path, skipped: list[Skipped]) -> Iterator[Path]:
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError as exc:
        skipped.append(Skipped(folder, f"cannot list the folder ({exc.strerror or exc}): skipped", True))
        return
    for entry in entries:
        path = folder / entry.name
        try:
            is_dir, is_file = entry.is_dir(follow_symlinks=False), entry.is_file()  # is_file: through a symlink
        except OSError as exc:  # a symlink loop (ELOOP), a file gone meanwhile: said, unless the walk ignores it
            if not entry.name.startswith(".") and not matcher.ignored(path, is_dir=False):
                why = "a symlink loop" if entry.is_symlink() else "cannot be read"
                skipped.append(Skipped(path, f"{why} ({exc.strerror or exc}): skipped", True))
            continue
        if is_dir:
            if entry.name.startswith(".") or entry.name in SKIPPED_DIRS or _is_environment(path):
                continue
            if not matcher.ignored(path, is_dir=True):
                yield from _walk(path, matcher.with_gitignore_of(path), inside, skipped)
        elif is_file:  # a regular file, or a symlink to one
            relative = _relative(path, matcher.base, is_dir=False)
            if not matcher.include.match_file(relative) or matcher.ignored(path, is_dir=False):
                continue
            target = Path(os.path.realpath(path))
            if entry.is_symlink() and inside not in target.parents:  # black skips links out of the folder too
                why = f"a symlink to {target}, outside the walked folder: skipped (name it to migrate it)"
                skipped.append(Skipped(path, why, False))
                continue
            yield path


def _matcher_for(folder: Path, root: Path, selection: Selection) -> _Matcher:
    """The .gitignore files from the root down to ``folder``; if they (or the patterns) exclude ``folder`` itself,
    only those at or below it, with the patterns relative to it."""
    gitignores = {}
    for parent in (*reversed(folder.parents), folder):
        if parent == root or root in parent.parents:
            spec = _gitignore(parent)
            if spec is not None:
                gitignores[parent] = spec
    matcher = _Matcher.make(root, selection, gitignores)
    if folder != root and matcher.ignored(folder, is_dir=True):
        own = {folder: gitignores[folder]} if folder in gitignores else {}
        return _Matcher.make(folder, selection, own)
    return matcher


def collect(
    paths: Sequence[Path], selection: Selection = Selection(), root: Path | None = None, skipped: list | None = None
) -> list[Path]:
    """The files to migrate, in the order given (directories sorted), each once (by its resolved path). What the
    walks passed over is appended to ``skipped`` (:class:`Skipped`)."""
    skipped = [] if skipped is None else skipped
    root = Path(os.path.abspath(root or find_root(paths)))
    force = _named_spec(selection)
    found: dict[str, Path] = {}
    for path in paths:
        path = Path(path)
        absolute = Path(os.path.abspath(path))
        if path.is_dir():
            matcher = _matcher_for(absolute, root, selection)
            passed_over: list[Skipped] = []
            for candidate in _walk(absolute, matcher, Path(os.path.realpath(absolute)), passed_over):
                shown = path / candidate.relative_to(absolute)
                found.setdefault(os.path.realpath(candidate), shown)
            skipped += [dataclasses.replace(s, path=path / s.path.relative_to(absolute)) for s in passed_over]
        elif path.exists() or path.is_symlink():
            if not _named_excluded(absolute, force, root):
                found.setdefault(os.path.realpath(absolute), path)
        else:
            raise FileNotFoundError(f"{path}: no such file or directory")
    return list(found.values())


def _named_spec(selection: Selection) -> GitIgnoreSpec:
    """The patterns a file named on the command line is matched against: ``force-exclude``, and with
    ``--force-exclude`` also ``exclude`` and ``extend-exclude``."""
    if selection.force_excludes:
        return _spec((*selection.force_exclude, *selection.exclude, *selection.extend_exclude), "exclude")
    return _spec(selection.force_exclude, "force-exclude")


def _named_excluded(absolute: Path, spec: GitIgnoreSpec, root: Path) -> bool:
    inside = root == absolute.parent or root in absolute.parents
    return bool(spec.match_file(_relative(absolute, root, is_dir=False) if inside else absolute.name))


def is_force_excluded(path: Path, selection: Selection = Selection(), root: Path | None = None) -> bool:
    """A file named on the command line (it need not exist: ``--stdin-filename``) that the selection leaves out."""
    absolute = Path(os.path.abspath(path))
    return _named_excluded(absolute, _named_spec(selection), Path(os.path.abspath(root or find_root([path]))))
