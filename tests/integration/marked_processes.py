"""Processes a test started, found by a marker in their environment (children inherit it), and killed."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

__all__ = ["kill_all", "started_with"]


def started_with(marker: str) -> list[int]:
    """Pids of the processes whose environment holds ``marker`` (a test's processes and their children)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in environ.split(b"\0"):
            pids.append(int(entry.name))
    return pids


def kill_all(marker: str, deadline_s: float = 30.0) -> None:
    """SIGTERM, then SIGKILL, every process holding ``marker``; each round waits up to ``deadline_s`` (a guard)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in started_with(marker):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        end = time.monotonic() + deadline_s
        while started_with(marker) and time.monotonic() < end:
            time.sleep(0.2)
