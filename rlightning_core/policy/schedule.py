"""How many gradient updates the data that reached the replay buffer warrants (the update-to-data ratio).

``learn(buffer)`` is called by whichever engine runs the policy — after every chunk in the ``async`` engine,
after every rollout in ``sync`` — so the policy itself keeps the ratio: after ``W`` transitions were written,
``floor(utd_ratio * (W - learning_starts))`` updates are due in total (Stable-Baselines3's count for
``train_freq=1, gradient_steps=utd_ratio``), and each call makes the ones still missing.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["UpdateSchedule", "transitions_written"]


def transitions_written(buffer: Any, previous: int) -> int:
    """Transitions written into ``buffer`` so far, ``previous`` being the count at the last call.

    Uses the buffer's ``total_added`` when it has one. Otherwise it reads a circular storage's size and
    cursor (``buffer.storage`` with ``capacity`` / ``cursor``, as core's ``ReplayBuffer``): while the storage
    fills, the count is its size; once full, the cursor's advance since the last call is added (assuming fewer
    than ``capacity`` transitions arrive between two calls).
    """
    total = getattr(buffer, "total_added", None)
    if total is not None:
        return int(total)
    size = len(buffer)
    storage = getattr(buffer, "storage", None)
    capacity = getattr(storage, "capacity", None)
    cursor = getattr(storage, "cursor", None)
    if capacity is None or cursor is None or size < int(capacity):
        return max(previous, size)
    capacity, cursor = int(capacity), int(cursor)
    advanced = previous + (cursor - previous) % capacity
    return advanced if advanced >= capacity else advanced + capacity


class UpdateSchedule:
    """Counts transitions written and updates made; :meth:`due` says how many updates to make now.

    After :meth:`load_state_dict` the first :meth:`due` checks whether the buffer came back with the data the
    count was made of. A resume can bring the policy's counters back without the transitions (a sharded
    buffer's shards, a checkpoint with another number of learners' buffer shards, a Ray checkpoint read in one
    process): the buffer then counts from zero, and the schedule counts on from what was written before,
    instead of making no update until the new buffer has caught up with the old count.

    Args:
        utd_ratio: gradient updates per transition written.
        learning_starts: transitions written before the first update.
    """

    def __init__(self, utd_ratio: float, learning_starts: int) -> None:
        self.utd_ratio = float(utd_ratio)
        self.learning_starts = int(learning_starts)
        self.written = 0
        self.updates = 0
        self._base = 0  # transitions written before the buffer's own count began (a buffer restarted empty)
        self._resumed = False

    def due(self, buffer: Any) -> int:
        """Updates to make now, given what ``buffer`` holds (counts them as made)."""
        if self._resumed:
            self._resumed = False
            self._base = self.written if _restarted_empty(buffer, self.written) else 0
        self.written = self._base + transitions_written(buffer, self.written - self._base)
        if self.written <= self.learning_starts or len(buffer) == 0:
            return 0
        target = math.floor(self.utd_ratio * (self.written - self.learning_starts) + 1e-9)
        n = max(0, target - self.updates)
        self.updates += n
        return n

    def state_dict(self) -> dict[str, int]:
        """The counters."""
        return {"written": self.written, "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.written, self.updates = int(state["written"]), int(state["updates"])
        self._base, self._resumed = 0, True


def _restarted_empty(buffer: Any, written: int) -> bool:
    """Whether ``buffer`` holds less than a restored buffer would after ``written`` transitions: it started over."""
    total = getattr(buffer, "total_added", None)
    if total is not None:
        return int(total) < written
    capacity = getattr(getattr(buffer, "storage", None), "capacity", None)
    return len(buffer) < (written if capacity is None else min(written, int(capacity)))
