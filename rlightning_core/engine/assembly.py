"""Whole rollouts assembled from streamed chunks: the async engine's learner step with an on-policy buffer.

Both executions use it (in one process and in the Ray learner actor), so a chunk's policy lag and the staleness
bound mean the same in both modes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

__all__ = ["RolloutAssembly"]


class RolloutAssembly:
    """Chunks wait (in arrival order) for one of every buffer column; each complete set is learned from at once.

    A chunk's lag (``version`` minus its weight version) is taken when its rollout is learned from, and a chunk
    past ``max_staleness`` by then is dropped: a chunk that waited across learn calls (and weight publications)
    for the other columns is measured as it aged, and the staleness bound holds for what is learned. The buffer
    is empty between calls.
    """

    def __init__(self) -> None:
        self.queue: list[Any] = []
        """Chunks waiting for a rollout, in arrival order."""

    def feed(self, buffer: Any, chunks: Iterable[Any], *, version: int, max_staleness: int | None,
             learn: Callable[[Any], dict[str, float]]) -> dict[str, Any]:
        """Queue ``chunks``; learn (``learn(buffer)``) from every rollout the queue completes, emptying the buffer.

        Returns ``metrics`` (the mean over the rollouts learned; ``stats/updates`` 0 when none was complete),
        ``lags`` (of each chunk learned from) and ``dropped`` (chunks past ``max_staleness``).
        """
        self.queue.extend(chunks)
        lags: list[int] = []
        dropped = 0
        learned: list[dict[str, float]] = []
        while True:
            fresh = [c for c in self.queue if max_staleness is None or version - int(c.weight_version) <= max_staleness]
            dropped += len(self.queue) - len(fresh)
            taken: list[Any] = []
            covered: set[int] = set()
            for chunk in fresh:  # the oldest chunk of each column
                cols = range(int(chunk.column), int(chunk.column) + int(chunk.num_envs))
                if covered.isdisjoint(cols):
                    taken.append(chunk)
                    covered.update(cols)
            if len(covered) < buffer.num_envs:
                self.queue = fresh
                break
            for chunk in taken:
                buffer.add(chunk)
            learned.append(learn(buffer))
            buffer.reset()
            lags += [int(version) - int(c.weight_version) for c in taken]
            used = {id(c) for c in taken}
            self.queue = [c for c in fresh if id(c) not in used]
        metrics = _mean(learned) if learned else {}
        metrics["stats/updates"] = float(sum(m.get("stats/updates", 1.0) for m in learned))
        return {"metrics": metrics, "lags": lags, "dropped": dropped}


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    """Per key, the mean over the rows that have it."""
    keys = {k for row in rows for k in row}
    return {k: float(np.mean([row[k] for row in rows if k in row])) for k in sorted(keys)}
