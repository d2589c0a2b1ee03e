"""The JSON-lines logger: one JSON object per logging step, each written as one complete line.

Every line goes to the file in one ``write`` call on an unbuffered descriptor; when the filesystem refuses
part of it (a full disk), the file is truncated back to where the line began, so the file always ends with a
complete line and a reader never sees half a record. A file that already ends with an incomplete line (a
machine that lost power mid-write) is cut back to its last complete line when it is reopened, so a resumed
run appends whole lines after whole lines.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from attrs import define, field

from rlightning_core.config.validators import relative_path
from rlightning_core.errors import StorageError, describe_os_error

log = logging.getLogger("rlightning")

#: How far back :class:`JsonlLogger` looks for the last newline of a file that ends with an incomplete line.
_TAIL_CHUNK = 1 << 16


@define(frozen=True, kw_only=True)
class JsonlParams:
    """Options of the ``jsonl`` logger."""

    filename: str = field(default="metrics.jsonl", validator=relative_path)
    """File name inside the run directory (a relative path; ``..`` and absolute paths are refused)."""


class LineFile:
    """An append-only file of complete lines: each line is written whole or not at all.

    Opening a file that ends with an incomplete line (a write cut off by a crash or power loss) cuts it back to
    its last complete line first, so appended lines never join a fragment.

    Raises:
        StorageError: (from the constructor or :meth:`append`) the file cannot be opened or written; the message
            names the file and ``what`` it holds.
    """

    def __init__(self, path: str | Path, *, what: str) -> None:
        self.path = Path(path)
        self.what = what
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open {self.path} for {what}: {describe_os_error(exc)}") from exc
        self._drop_incomplete_tail(self._fd)

    def append(self, data: bytes) -> None:
        """Append ``data`` (complete lines) whole, or not at all (truncated back to where it began)."""
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        start = os.fstat(self._fd).st_size
        view = memoryview(data)
        try:
            while view:  # a full disk may take part of the line before refusing the rest
                view = view[os.write(self._fd, view):]
        except OSError as exc:
            cut = ""
            try:
                os.ftruncate(self._fd, start)
            except OSError as again:
                cut = f"; the incomplete line could not be removed ({describe_os_error(again)})"
            raise StorageError(f"cannot write {self.what} to {self.path}: {describe_os_error(exc)}{cut}") from exc

    def close(self) -> None:
        """Close the file."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def _drop_incomplete_tail(self, fd: int) -> None:
        """Cut a file that ends in the middle of a line back to its last complete line (logged)."""
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return
        end = size
        keep = 0
        while end > 0:
            begin = max(0, end - _TAIL_CHUNK)
            newline = os.pread(fd, end - begin, begin).rfind(b"\n")
            if newline >= 0:
                keep = begin + newline + 1
                break
            end = begin
        with contextlib.suppress(OSError):  # if even this fails, the next write reports the file
            os.ftruncate(fd, keep)
            log.warning("%s ended with an incomplete line (%d bytes, from a write that was cut off): removed it",
                        self.path, size - keep)


class JsonlLogger:
    """Appends ``{"step": ..., **metrics}`` lines to a file in the run directory.

    Raises:
        StorageError: (from the constructor or :meth:`log`) the file cannot be opened or written, e.g. the disk
            is full; the message names the file, and the file still ends with a complete line.
    """

    def __init__(self, params: JsonlParams, *, run_dir: str | Path) -> None:
        self.file = LineFile(Path(run_dir) / params.filename, what="metrics")
        self.path = self.file.path

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Write one line; non-finite floats are written as null so the file stays valid JSON."""
        row: dict[str, Any] = {"step": int(step)}
        for key, value in metrics.items():
            v = float(value) if not isinstance(value, str) else value
            row[key] = None if isinstance(v, float) and not math.isfinite(v) else v
        self.file.append((json.dumps(row) + "\n").encode("utf-8"))

    def close(self) -> None:
        """Close the file."""
        self.file.close()
