"""``cachemigrate migrate`` over a package unit (:mod:`cachemigrate.source.units`): its modules migrated together
(:mod:`cachemigrate.package_engine`) and written all or none.

Every module is written whole (:func:`~cachemigrate.source.writing.write_atomically`). Before anything is written,
each module that would change is checked (read-only, changed on disk since it was read); if one write fails all the
same, the modules already written get their original bytes back, and every module of the unit is reported unchanged:
the one that could not be written with the reason, the others with what happened to them. A file named alone whose
model spans its siblings is migrated with them, with a CM921 note that names them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from .. import diagnostics as codes
from ..diagnostics import Diagnostic
from ..results import Options
from ..source.decode import decode
from ..source.writing import is_read_only, read_only_diagnostic, write_atomically
from .result_cache import digest
from .runner import ENGINE, Result, changed_meanwhile, changed_since_read, failed, read


def migrate_unit(unit: list[Path], named: set[Path], ruleset, options: Options) -> list[Result]:
    """The results of the unit's modules (not written); ``named``: the resolved paths the run named."""
    from ..package_engine import migrate_package

    paths = [str(path) for path in unit]
    data: dict[str, bytes] = {}
    sources, codecs = {}, {}
    for path in paths:
        read_bytes = read(path)
        source = decode(read_bytes, path) if isinstance(read_bytes, bytes) else None
        if not isinstance(read_bytes, bytes) or isinstance(source, Diagnostic):
            problem = read_bytes.diagnostics[0] if not isinstance(read_bytes, bytes) else source
            return _all_unchanged(paths, problem, "could not be read")
        data[path], sources[path], codecs[path] = read_bytes, source.text, source.codec
    try:
        found_all = migrate_package(sources, ruleset, options)
    except RecursionError:
        why = "the code of a module is nested too deep for the engine"
        return _all_unchanged(paths, Diagnostic(paths[0], 1, 1, codes.TOO_DEEP, why), "could not be analysed")
    except Exception as exc:  # an engine bug: reported for the unit, the run goes on  # noqa: BLE001
        why = f"internal error: {type(exc).__name__}: {exc}; the package was left unchanged"
        return _all_unchanged(
            paths, Diagnostic(paths[0], 1, 1, codes.REGION_VIOLATION, why), "hit an internal error", "error"
        )
    results = []
    for found in found_all:
        fields = {f.name: getattr(found, f.name) for f in dataclasses.fields(found) if f.init}
        result = Result(**fields, codec=codecs[found.path], how=ENGINE, read_digest=digest(data[found.path]))
        results.append(result)
    if any(r.status == "migrated" for r in results):
        results = [_with_notice(r, unit, named) for r in results]
    return results


def _with_notice(result: Result, unit: list[Path], named: set[Path]) -> Result:
    """CM921 on a file the run named, when the unit holds modules the run did not name."""
    others = [path.name for path in unit if path.resolve() not in named]
    if Path(result.path).resolve() not in named or not others:
        return result
    note = Diagnostic(
        result.path,
        1,
        1,
        codes.WITH_SIBLINGS,
        f"the model of {Path(result.path).name} spans its sibling modules ({', '.join(others)}), which import one "
        "another: they were analysed and migrated with it as one package (all of them or none)",
    )
    return dataclasses.replace(result, diagnostics=sorted([*result.diagnostics, note]))


def _all_unchanged(paths: list[str], problem: Diagnostic, what: str, status: str = "failed") -> list[Result]:
    """Every module of the unit unchanged: ``problem`` at its own module, a note at the others."""
    results = []
    for path in paths:
        result = Result(path, "", "", status, how=ENGINE)
        if path == problem.path:
            results.append(dataclasses.replace(result, diagnostics=[problem]))
            continue
        why = (
            f"left unchanged: {Path(problem.path).name}, a module of the same package, {what}, and a package is "
            "migrated all or none"
        )
        results.append(dataclasses.replace(result, diagnostics=[Diagnostic(path, 1, 1, problem.code, why)]))
    return results


def write_unit(
    results: list[Result], write: Callable[[str, bytes], None] = write_atomically
) -> tuple[list[Result], int]:
    """Write the unit's changed modules, all or none: (the results, failed where nothing was kept; files written)."""
    changed = [r for r in results if r.changed]
    problem = next((p for r in changed if (p := _cannot_write(r)) is not None), None)
    written: list[tuple[Result, bytes]] = []
    if problem is None:
        for result in changed:
            try:
                before = Path(result.path).read_bytes()  # the bytes read: changed_since_read said so just now
                write(result.path, result.encoded())
            except OSError as exc:
                why = f"cannot write the file: {exc.strerror or exc}; the package was left unchanged"
                problem = Diagnostic(result.path, 1, 1, codes.UNWRITABLE, why)
                break
            written.append((result, before))
    if problem is None:
        return results, len(written)
    restored = []
    for result, before in reversed(written):  # the original bytes back (the same atomic write)
        write_atomically(result.path, before)
        restored.append(Path(result.path).name)
    undone = f" ({', '.join(reversed(restored))} written, then restored)" if restored else ""
    out = []
    for result in results:
        if result.path == problem.path:
            out.append(failed(result, problem))
            continue
        why = (
            f"left unchanged{undone if Path(result.path).name in restored else ''}: {Path(problem.path).name}, a "
            "module of the same package, could not be written, and a package is migrated all or none"
        )
        out.append(failed(result, Diagnostic(result.path, 1, 1, problem.code, why)) if result.changed else result)
    return out, 0


def _cannot_write(result: Result) -> Diagnostic | None:
    if is_read_only(result.path):
        return read_only_diagnostic(result.path)
    if changed_since_read(result):
        return changed_meanwhile(result.path)
    return None
