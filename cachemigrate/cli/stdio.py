"""``cachemigrate migrate -``: the code on standard input, the result on standard output, like black and ruff.

* Without ``--check``/``--diff``, standard output gets the migrated code, or the input unchanged when there is
  nothing to migrate, when it cannot be migrated (diagnostics) or when ``--stdin-filename`` is force-excluded:
  an editor or a pipe can always take what comes out.
* ``--diff`` prints the diff on standard output; ``--check`` prints nothing there; both exit 1 if it would change.
* Diagnostics and the status line go to standard error. ``--stdin-filename`` names the code: it finds the
  pyproject.toml, is matched by ``--force-exclude``, and is the path in the diagnostics (else ``-``).
"""

from __future__ import annotations

import sys

from .batch import EXIT_CHANGES, EXIT_INTERNAL, EXIT_OK, Batch, verb_of, with_config_notes
from .progress import Reporter
from ..edit.render import unified_diff
from .runner import Failure, migrate_one
from ..edit.width import width_note


def migrate_stdin(data: bytes, name: str | None, batch: Batch, excluded: bool) -> int:
    path = name or "-"
    stdout = sys.stdout.buffer
    if excluded:
        if batch.writes:
            stdout.write(data)
            stdout.flush()
        return EXIT_OK
    result = migrate_one(
        path, data, batch.era, batch.rule_dirs, batch.options, batch.open_cache(), batch.checked_rules()
    )
    show = Reporter(1, batch.verbose, batch.quiet, batch.color)
    if isinstance(result, Failure):
        show.err(f"error: {path}: internal error: {result.error}")
        output, status = data, EXIT_INTERNAL
    else:
        result = with_config_notes(result, batch.era)
        for diagnostic in result.diagnostics:
            show.err(str(diagnostic))
        output = result.encoded() if result.changed else data
        status = EXIT_CHANGES if result.status == "failed" or (batch.check and result.changed) else EXIT_OK
        if batch.show_diff and result.changed:
            show.diff(unified_diff(path, result.original, result.migrated))
        show.file(path, result.status, verb_of(result, batch.writes), result.seconds, result.how)
        if result.changed and batch.verbose and not batch.quiet:
            show.err(f"  inserted code of {path}: {width_note(batch.options.line_length, result.original)}")
    if batch.writes:
        stdout.write(output)
        stdout.flush()
    return status
