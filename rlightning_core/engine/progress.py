"""A one-line terminal progress bar: steps, SPS, last eval return, ETA. Drawn only on a TTY."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """Redraws ``[####......] 45% 45,000/100,000 steps | 12,000 sps | eval 480.5 | ETA 5s`` in place."""

    def __init__(self, total: int, *, enabled: bool = True, stream: TextIO | None = None,
                 min_interval_s: float = 0.2) -> None:
        self.stream = stream or sys.stderr
        self.total = max(1, int(total))
        self.enabled = enabled and self.stream.isatty()
        self.min_interval_s = min_interval_s
        self._last_draw = 0.0
        self._drawn = False

    def update(self, steps: int, *, sps: float, train_s: float, eval_return: float | None) -> None:
        """Redraw (at most every ``min_interval_s``)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last_draw < self.min_interval_s and steps < self.total:
            return
        self._last_draw = now
        frac = min(1.0, steps / self.total)
        bar = "#" * int(frac * 20)
        eta = (self.total - steps) / sps if sps > 0 else float("inf")
        ev = f" | eval {eval_return:.1f}" if eval_return is not None else ""
        eta_s = f"{eta:.0f}s" if eta != float("inf") else "?"
        line = (f"\r[{bar:<20}] {frac:4.0%} {steps:,}/{self.total:,} steps | {sps:,.0f} sps{ev} | "
                f"{train_s:.0f}s | ETA {eta_s}")
        self.stream.write(line.ljust(100))
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        """End the line."""
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
