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


def kill_all(marker: str, deadline_s: float = 60.0) -> None:
    """SIGKILL every process holding ``marker`` until none is left (``deadline_s``: a guard against a hang).

    Straight to SIGKILL: these are a test's own Ray processes, with nothing to save, and some of them (the
    ``ray start --block`` parent among them) outlive a SIGTERM, which only made the cleanup wait.
    """
    end = time.monotonic() + deadline_s
    while pids := started_with(marker):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > end:
            raise RuntimeError(f"processes {pids} ({marker}) survived SIGKILL for {deadline_s:g}s")
        time.sleep(0.1)
