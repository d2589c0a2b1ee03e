"""Fan-out of metrics to every sink: the run's ``metrics.jsonl``, configured loggers, and ``on_metrics`` hooks.

Metrics produced anywhere (learner, rollout workers, remote actors) arrive here on the driver as plain
``name -> float`` dicts and reach every logger at once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlightning_core.logging.jsonl import JsonlLogger, JsonlParams

__all__ = ["MetricsHub"]

log = logging.getLogger("rlightning")


class MetricsHub:
    """Sends each metrics row to ``metrics.jsonl``, to the configured loggers and to plugin observers.

    A logger that raises is reported once and then skipped, so one broken logger cannot stop a run.
    """

    def __init__(self, run_dir: str | Path, loggers: Sequence[Any] = (), plugins: Any = None) -> None:
        self.run_dir = Path(run_dir)
        self.jsonl = JsonlLogger(JsonlParams(), run_dir=self.run_dir)
        self.loggers = list(loggers)
        self.plugins = plugins
        self._broken: set[int] = set()
        self._broken_video: set[int] = set()
        self.last: dict[str, float] = {}

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Record one row of metrics at ``step`` (env steps so far)."""
        row = {k: float(v) for k, v in metrics.items() if _is_number(v)}
        self.last.update(row)
        self.jsonl.log(step, row)
        for i, logger in enumerate(self.loggers):
            if i in self._broken:
                continue
            try:
                logger.log(step, row)
            except Exception as exc:
                self._broken.add(i)
                log.warning("logger %s failed and is disabled for this run: %s", type(logger).__name__, exc)
        if self.plugins is not None:
            self.plugins.call_each("on_metrics", step=step, metrics=row)

    def log_video(self, step: int, path: Path, *, tag: str = "video", fps: int = 30) -> None:
        """Hand a finished MP4 to every logger that takes videos and to ``on_video`` hooks.

        A logger takes videos when it has a ``log_video(step, path, *, tag, fps)`` method (optional in the
        logger contract); loggers without one are skipped. A logger whose ``log_video`` raises is reported
        once and gets no further videos (its metrics keep flowing).
        """
        for i, logger in enumerate(self.loggers):
            method = getattr(logger, "log_video", None)
            if method is None or i in self._broken or i in self._broken_video:
                continue
            try:
                method(step, path, tag=tag, fps=fps)
            except Exception as exc:
                self._broken_video.add(i)
                log.warning("logger %s failed to take a video and gets no more videos this run: %s",
                            type(logger).__name__, exc)
        if self.plugins is not None:
            self.plugins.call_each("on_video", path=path, step=step, tag=tag)

    def close(self) -> None:
        """Flush and close every logger."""
        for logger in [self.jsonl, *self.loggers]:
            try:
                logger.close()
            except Exception as exc:
                log.warning("logger %s failed to close: %s", type(logger).__name__, exc)


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, str) or False
