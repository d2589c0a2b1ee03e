"""Shared next observations for the replay buffer: ``next_obs`` stored once, not twice, where it can be.

A transition's ``next_obs`` is usually the ``obs`` of the env's next transition. With
``buffer.params.share_next_obs`` (on by default for ``uint8`` observations such as images) the replay buffer
stores, per transition, a reference instead of the array: the storage row of the later transition whose ``obs``
equals it byte for byte (checked when written), or a slot of :class:`NextObsPool` for those that have none —
the final observation where an episode ended, and the last step of each env in a chunk (its successor arrives
with the next chunk). The pool holds one slot per such transition and frees it when the transition is
overwritten, so it stays a small fraction of the capacity (about ``1 / rollout_steps`` plus the episode-end
rate).

A reference always points forward within one write: the circular storage overwrites rows in the order it
wrote them, so the referenced row outlives the transition that references it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["NextObsPool", "successors_equal"]


class NextObsPool:
    """Growable storage of the ``next_obs`` that are no other transition's ``obs``; slots are reused once freed.

    Args:
        shape: per-item shape.
        dtype: torch dtype.
        device: where the arrays live (the replay storage's device).
    """

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> None:
        self.shape, self.dtype, self.device = tuple(shape), dtype, torch.device(device)
        self.data = torch.empty((0, *self.shape), dtype=dtype, device=self.device)
        self.free: list[int] = []
        self.used = 0
        """Slots handed out so far (the high-water mark; ``free`` lists those given back)."""

    @property
    def live(self) -> int:
        """Slots in use."""
        return self.used - len(self.free)

    def alloc(self, values: np.ndarray | torch.Tensor) -> np.ndarray:
        """Store ``values`` (first axis = items); returns their slots (freed ones first, last freed first)."""
        k = int(values.shape[0])
        reuse = min(k, len(self.free))
        slots = [self.free.pop() for _ in range(reuse)]
        slots += range(self.used, self.used + k - reuse)
        self.used += k - reuse
        if self.used > self.data.shape[0]:  # grow geometrically: amortized O(1) copies per item
            grown = torch.empty((max(self.used, 2 * self.data.shape[0]), *self.shape), dtype=self.dtype,
                                device=self.device)
            grown[: self.data.shape[0]].copy_(self.data)
            self.data = grown
        index = torch.as_tensor(np.asarray(slots, dtype=np.int64), device=self.device)
        if k:
            self.data.index_copy_(0, index, torch.as_tensor(np.asarray(values)).to(self.device))
        return np.asarray(slots, dtype=np.int64)

    def release(self, slots: np.ndarray) -> None:
        """Give ``slots`` back (their transitions were overwritten)."""
        self.free.extend(int(s) for s in slots)

    def get(self, slots: torch.Tensor) -> torch.Tensor:
        """The items at ``slots``."""
        return torch.index_select(self.data, 0, slots.to(self.device))

    def state_dict(self) -> dict[str, Any]:
        """The slots handed out so far and the free list."""
        return {"data": self.data[: self.used].clone(), "free": torch.tensor(self.free, dtype=torch.int64)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        data = state["data"]
        self.used = int(data.shape[0])
        self.data = torch.empty((self.used, *self.shape), dtype=self.dtype, device=self.device)
        self.data.copy_(data)
        self.free = [int(s) for s in state["free"].tolist()]


def successors_equal(obs: np.ndarray, next_obs: np.ndarray, succ: np.ndarray) -> np.ndarray:
    """Whether row ``i``'s ``next_obs`` equals the ``obs`` of row ``succ[i]`` byte for byte (``succ < 0``: no)."""
    ok = succ >= 0
    rows = np.flatnonzero(ok)
    if rows.size:
        a = np.ascontiguousarray(next_obs[rows]).reshape(rows.size, -1)
        b = np.ascontiguousarray(obs[succ[rows]]).reshape(rows.size, -1)
        word = np.uint64 if (a.shape[1] * a.itemsize) % 8 == 0 else np.uint8  # bytes, 8 at a time if possible
        a, b = a.view(word), b.view(word)
        ok[rows] = (a == b).all(axis=1)
    return ok
