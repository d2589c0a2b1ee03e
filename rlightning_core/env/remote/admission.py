"""Who may wait in the env server's handshake, and how refusals reach the log.

Two defences against peers that need no token to be a nuisance:

- :class:`PendingHandshakes`: a connection that has not sent its ``hello`` holds a handshake place, and there are
  :data:`MAX_PENDING_HANDSHAKES` of them. When they are all taken, a new connection does not get ``busy``:
  the oldest waiting connection of the peer address holding the most places is closed to make room. So idle
  connections (any number, from any address) cannot lock a real client out: a client sends its ``hello`` as soon
  as it connects, and it is then the newest connection, not the oldest.
- :class:`RefusalLog`: the first :data:`REFUSAL_LOG_BURST` refusals of each :data:`REFUSAL_LOG_WINDOW_S` are
  logged in full; the rest are counted and summed up in one line (by code) when the window is over. A flood of
  bad handshakes costs a bounded number of log lines, not one each.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs

__all__ = ["MAX_PENDING_HANDSHAKES", "REFUSAL_LOG_BURST", "REFUSAL_LOG_WINDOW_S", "PendingHandshakes", "RefusalLog"]

log = logging.getLogger("rlightning.remote")

MAX_PENDING_HANDSHAKES = 32
"""Connections waiting for their ``hello`` at once (one thread each); a new one beyond makes room (see above)."""

REFUSAL_LOG_BURST = 20
"""Refusals logged in full per :data:`REFUSAL_LOG_WINDOW_S`; the others of the window are counted."""

REFUSAL_LOG_WINDOW_S = 10.0
"""Length of a refusal-log window (seconds)."""


@attrs.define(eq=False)
class Pending:
    """One connection in the handshake."""

    sock: socket.socket
    peer: tuple[str, int]
    seq: int
    hello: bool = False
    """Its ``hello`` arrived: it is being admitted and can no longer be made room for."""
    evicted: bool = False
    """Closed to make room for a newer connection; its handshake thread refuses it as ``busy``."""


class PendingHandshakes:
    """The connections in the handshake, and which one makes room when they are :attr:`limit` (thread-safe)."""

    def __init__(self, limit: int = MAX_PENDING_HANDSHAKES) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._pending: dict[int, Pending] = {}
        self._seq = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

    def enter(self, sock: socket.socket, peer: tuple[str, int]) -> Pending | None:
        """Register a new connection; ``None`` when every place is held by a connection already being admitted.

        When the places are full, the oldest connection still waiting for its ``hello`` of the address that
        holds the most such places is marked evicted and its socket shut for reading, which wakes its
        handshake thread (that thread then refuses it).
        """
        victim: Pending | None = None
        with self._lock:
            if len(self._pending) >= self.limit:
                waiting = [p for p in self._pending.values() if not p.hello]
                if not waiting:
                    return None
                per_address = Counter(p.peer[0] for p in waiting)
                most = max(per_address.values())
                victim = min((p for p in waiting if per_address[p.peer[0]] == most), key=lambda p: p.seq)
                victim.evicted = True
                del self._pending[victim.seq]
            self._seq += 1
            entry = Pending(sock=sock, peer=peer, seq=self._seq)
            self._pending[entry.seq] = entry
        if victim is not None:
            try:
                victim.sock.shutdown(socket.SHUT_RD)
            except OSError:
                pass
        return entry

    def got_hello(self, entry: Pending) -> bool:
        """Mark ``entry``'s ``hello`` as received; ``False`` if it was evicted meanwhile (then refuse it)."""
        with self._lock:
            if entry.evicted:
                return False
            entry.hello = True
            return True

    def leave(self, entry: Pending) -> None:
        """The handshake of ``entry`` ended (admitted or refused)."""
        with self._lock:
            self._pending.pop(entry.seq, None)


class RefusalLog:
    """Logs refused connections, rate-limited: bursts in full, the rest as counts (thread-safe).

    Args:
        label: the server's name in log lines.
        burst: refusals logged in full per window.
        window_s: window length.
        clock: monotonic seconds (injectable, so a test can decide when a window ends).
    """

    def __init__(self, label: str, *, burst: int = REFUSAL_LOG_BURST, window_s: float = REFUSAL_LOG_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.burst = burst
        self.window_s = window_s
        self.clock = clock
        self._lock = threading.Lock()
        self._window_start: float | None = None
        self._logged = 0
        self._suppressed: Counter[str] = Counter()

    def refused(self, peer: Any, code: str, message: str) -> None:
        """Record one refusal: a full line while the window's burst lasts, else a count for the summary."""
        with self._lock:
            summary = self._roll(self.clock())
            full = self._logged < self.burst
            if full:
                self._logged += 1
            else:
                self._suppressed[code] += 1
        if summary:
            log.warning("%s", summary)
        if full:
            log.warning("remote env %s: refused connection from %s:%s: %s: %s", self.label, peer[0], peer[1], code,
                        message)

    def flush(self, *, force: bool = False) -> None:
        """Log the summary of a window that is over (``force``: of the current one too, e.g. at close)."""
        with self._lock:
            now = self.clock()
            summary = self._roll(now) if not force else self._summary(now)
            if force:
                self._window_start, self._logged = None, 0
        if summary:
            log.warning("%s", summary)

    def _roll(self, now: float) -> str:
        """Start a new window if the current one is over; returns the summary line of the old one ('' if none)."""
        if self._window_start is not None and now - self._window_start < self.window_s:
            return ""
        summary = self._summary(now)
        self._window_start, self._logged = now, 0
        return summary

    def _summary(self, now: float) -> str:
        if not self._suppressed:
            return ""
        total = sum(self._suppressed.values())
        codes = ", ".join(f"{code}: {n}" for code, n in sorted(self._suppressed.items()))
        seconds = now - (self._window_start if self._window_start is not None else now)
        self._suppressed.clear()
        return (f"remote env {self.label}: refused {total} more connection(s) in {seconds:.0f} s ({codes}); "
                f"the first {self.burst} of every {self.window_s:g} s are logged in full")
