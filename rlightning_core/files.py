"""Writing the run's files safely: atomic writes, refused files set aside, storage failures named.

Every file that must never be seen half-written (checkpoints and their index, the run's ``config.yaml``, a remote
env server's address file) is written by :func:`atomic_write` (or :func:`write_text_atomic`): through a hidden
temp file in its directory (``.<name>.<hex>.tmp``), flushed, fsynced and renamed over its final name, and the
directory is fsynced. A reader never sees half a file, and a crash leaves at most a temp file (the checkpoint
manager removes those of its directory on its next write).

A file rlightning cannot use (a damaged or planted checkpoint, a directory where ``index.json`` belongs) is
never overwritten or deleted: :func:`set_aside` renames it to ``<name>.rejected`` so the evidence survives and
nothing that scans for ``ckpt-*.pt`` counts it again.

An ``OSError`` while writing (a full disk, a quota, a read-only or failing filesystem) becomes a
:class:`~rlightning_core.errors.StorageError` that names the file and what failed; the temp file is removed so
the previous version of the file stays in place.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from rlightning_core.errors import StorageError, describe_os_error

__all__ = ["REJECTED_SUFFIX", "atomic_write", "describe_os_error", "fsync_dir", "set_aside", "write_text_atomic"]

log = logging.getLogger("rlightning")

#: Suffix of a refused file once it is set aside (``ckpt-00000012.pt.rejected``).
REJECTED_SUFFIX = ".rejected"


class _RecordingWriter:
    """A file wrapper that remembers the first ``OSError`` its ``write`` raised.

    ``torch.save`` writes through C++, which reports a failed write as ``RuntimeError: [enforce fail at
    inline_container.cc] unexpected pos ...``; the recorded error says what really happened (``ENOSPC``).
    """

    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self._fh.write(data)
        except OSError as exc:
            self.error = self.error or exc
            raise

    def flush(self) -> None:
        self._fh.flush()


def atomic_write(path: Path, write: Callable[[Any], Any], *, what: str) -> None:
    """Write ``path`` through a temp file in its directory: write, flush, fsync, rename, fsync the dir.

    Args:
        path: the final file name.
        write: called with a binary file object (its ``write`` and ``flush``) to produce the content.
        what: what the file is, for the error message (``checkpoint``, ``checkpoint index``, ``run config``).

    Raises:
        StorageError: the filesystem refused the write (disk full, quota, read-only, I/O error); the temp file
            is gone and ``path`` is as it was.
    """
    if (path.exists() or path.is_symlink()) and not (path.is_file() or path.is_symlink()):
        moved = set_aside(path, reason="not a regular file")  # os.replace cannot rename a file over a directory
        log.warning("%s %s was not a regular file (a directory?), so it cannot be replaced: moved to %s", what,
                    path, moved.name)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as exc:
        raise StorageError(f"cannot write {what} {path}: {describe_os_error(exc)} (creating {tmp.name})") from exc
    fh = os.fdopen(fd, "wb")
    writer = _RecordingWriter(fh)
    try:
        write(writer)
        fh.flush()
        os.fsync(fh.fileno())
        fh.close()
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):  # closing flushes what is buffered: it fails again on a full disk
            fh.close()
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        cause = writer.error or (exc if isinstance(exc, OSError) else None)
        if cause is not None:
            raise StorageError(f"cannot write {what} {path}: {describe_os_error(cause)}") from cause
        raise
    try:
        fsync_dir(path.parent)
    except OSError as exc:
        raise StorageError(f"cannot write {what} {path}: {describe_os_error(exc)} (syncing its directory)") from exc


def write_text_atomic(path: Path, text: str, *, what: str) -> None:
    """:func:`atomic_write` of ``text`` encoded as UTF-8.

    Raises:
        StorageError: as :func:`atomic_write`; ``path`` is as it was.
    """
    data = text.encode("utf-8")
    atomic_write(path, lambda fh: fh.write(data), what=what)


def fsync_dir(directory: Path) -> None:
    """Make a rename durable (POSIX; other systems cannot open a directory and need not)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def set_aside(path: Path, *, reason: str) -> Path:
    """Rename a file rlightning refuses to ``<name>.rejected`` (``.rejected.2``, ... if taken); returns it.

    Args:
        path: the refused file (or directory).
        reason: why it is refused, for the error message if the rename fails.

    Raises:
        StorageError: the rename failed (e.g. a read-only filesystem).
    """
    target = path.with_name(path.name + REJECTED_SUFFIX)
    n = 1
    while target.exists() or target.is_symlink():
        n += 1
        target = path.with_name(f"{path.name}{REJECTED_SUFFIX}.{n}")
    try:
        os.replace(path, target)
    except OSError as exc:
        raise StorageError(f"cannot move {path} ({reason}) aside to {target.name}: "
                           f"{describe_os_error(exc)}") from exc
    return target
