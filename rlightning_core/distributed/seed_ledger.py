"""The seed ledger: every seed a worker was started with, appended to ``RUN_DIR/seeds.jsonl``.

Per-worker seeds derive from ``(run seed, group, rank, restart count)`` (:func:`rlightning_core.env.seeding.
derive_seed`), so a recreated worker does not replay the episodes its predecessor saw. Each (re)start appends
one JSON line — role, group (env config index), rank (worker index / learner rank), restart count, seed — so a
run's randomness can be audited and a worker's episodes reproduced. Lines recorded before the run directory
exists (actors start before ``engine.run``) are buffered and written when it is attached. Only the driver
writes the file, whole lines only (a line cut off by a crash is dropped when a resumed run reopens it).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

__all__ = ["SeedLedger"]


class SeedLedger:
    """Buffered, append-only ``seeds.jsonl`` writer."""

    FILE = "seeds.jsonl"

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self._pending: list[dict[str, Any]] = []
        self.path: Path | None = None
        self._file: Any = None

    def record(self, role: str, *, group: int, rank: int, restart: int, seed: int, **extra: Any) -> None:
        """Note one worker (re)start and its seed."""
        entry = {"time": round(time.time(), 3), "event": "restart" if restart else "start", "role": role,
                 "group": int(group), "rank": int(rank), "restart": int(restart), "seed": int(seed), **extra}
        self.records.append(entry)
        self._pending.append(entry)
        self.flush()

    def attach(self, run_dir: str | Path) -> None:
        """Start writing into ``run_dir`` (what was recorded so far goes first)."""
        from rlightning_core.logging.jsonl import LineFile

        if self._file is not None:
            self._file.close()
        self._file = LineFile(Path(run_dir) / self.FILE, what="the seed ledger")
        self.path = self._file.path
        self.flush()

    def flush(self) -> None:
        """Append the buffered lines (once a run directory is attached)."""
        if self._file is None or not self._pending:
            return
        self._file.append("".join(json.dumps(entry) + "\n" for entry in self._pending).encode("utf-8"))
        self._pending = []

    def close(self) -> None:
        """Close the file (records made afterwards stay buffered)."""
        if self._file is not None:
            self._file.close()
            self._file = None
