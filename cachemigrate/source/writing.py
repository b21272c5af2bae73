"""Writing files safely: all at once (a crash or a signal never leaves half a file), through symlinks, keeping the
mode, and never over a read-only file."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .. import diagnostics as codes
from ..diagnostics import Diagnostic


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomically(path: Path | str, data: bytes) -> None:
    """Replace the file at ``path`` with ``data`` in one step (``os.replace`` of a finished temporary file in the
    same directory). A symlink stays a symlink: its target is written, in the target's directory, as black does.
    The mode (and, where allowed, the owner) of the file is kept; a new file gets the default mode."""
    target = Path(os.path.realpath(path))
    try:
        info: os.stat_result | None = target.stat()
    except FileNotFoundError:
        info = None
    handle, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".cachemigrate")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        if info is None:
            os.chmod(temp, 0o666 & ~_umask())
        else:
            os.chmod(temp, stat.S_IMODE(info.st_mode))
            if hasattr(os, "chown") and (info.st_uid, info.st_gid) != (os.getuid(), os.getgid()):
                try:
                    os.chown(temp, info.st_uid, info.st_gid)
                except PermissionError:
                    pass
        os.replace(temp, target)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def is_read_only(path: Path | str) -> bool:
    """The file (the target of a symlink) has no write permission for its owner, or none for this user.

    The owner's write bit counts even for root, who may write anyway: a file someone made read-only is left alone."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not mode & stat.S_IWUSR or not os.access(path, os.W_OK)


def read_only_diagnostic(path: str) -> Diagnostic:
    why = "the file is read-only: it was not rewritten (make it writable to migrate it, or leave it out of the run)"
    return Diagnostic(path, 1, 1, codes.READ_ONLY, why)


def cannot_write(path: Path | str) -> str | None:
    """Why a file cannot be written at ``path`` (for ``--report``, checked before anything else is written), or
    None. The check makes (and removes) a temporary file next to it, as the real write will."""
    path = Path(path)
    target = Path(os.path.realpath(path))
    if target.is_dir():
        return f"{path}: is a directory"
    if not target.parent.is_dir():
        return f"{path}: the directory {target.parent} does not exist"
    if target.exists() and is_read_only(target):
        return f"{path}: the file is read-only"
    try:
        handle, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".cachemigrate")
    except OSError as exc:
        return f"{path}: cannot write in {target.parent}: {exc.strerror or exc}"
    os.close(handle)
    os.unlink(temp)
    return None
