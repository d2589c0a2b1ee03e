"""A numpy sum tree (with a min tree alongside) for proportional prioritized replay (Schaul et al. 2016).

The tree is a perfect binary tree stored in one flat array: node ``i`` has children ``2i`` and ``2i+1``, the
root is node 1, and the ``L`` leaves (``L`` = capacity rounded up to a power of two) are nodes ``L .. 2L-1``.
Every internal node holds the sum (and, in the second array, the minimum) of its children, so

- the total priority is ``sum[1]`` and the smallest one ``min[1]`` (for importance-weight normalization);
- finding the leaf whose prefix-sum interval holds a value ``v`` walks one root-to-leaf path.

Both operations are vectorized over a batch: :meth:`SumTree.update` writes all leaves at once and then
recomputes each level's touched parents with one numpy expression (``log2 L`` steps in total), and
:meth:`SumTree.find_prefixsum` descends all queries together, one level per step. No Python loop runs per
transition.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["SumTree"]


class SumTree:
    """Sums and minima over ``capacity`` non-negative leaf values, with batched update and prefix-sum search.

    Args:
        capacity: number of leaves (items of the replay storage). Unwritten leaves are 0 in the sum tree and
            ``+inf`` in the min tree, so they are never sampled and never the minimum.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"SumTree capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._depth = max(0, (self.capacity - 1).bit_length())
        self._leaf0 = 1 << self._depth
        self._sum = np.zeros(2 * self._leaf0, dtype=np.float64)
        self._min = np.full(2 * self._leaf0, np.inf, dtype=np.float64)

    @property
    def total(self) -> float:
        """Sum of all leaves."""
        return float(self._sum[1])

    @property
    def min(self) -> float:
        """Smallest written leaf (``inf`` when none is written)."""
        return float(self._min[1])

    def __getitem__(self, indices: np.ndarray | int) -> np.ndarray:
        """Leaf values at ``indices``."""
        return self._sum[np.asarray(indices, dtype=np.int64) + self._leaf0]

    def update(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Set leaves ``indices`` to ``values`` and refresh their ancestors (duplicates: last value wins)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        vals = np.asarray(values, dtype=np.float64).reshape(-1)
        if idx.size == 0:
            return
        if vals.size == 1:
            vals = np.broadcast_to(vals, idx.shape)
        if vals.shape != idx.shape:
            raise ValueError(f"update() got {idx.size} indices but {vals.size} values")
        if idx.min() < 0 or idx.max() >= self.capacity:
            raise IndexError(f"leaf indices must lie in [0, {self.capacity}), got [{idx.min()}, {idx.max()}]")
        if not np.all(np.isfinite(vals)) or np.any(vals < 0):
            raise ValueError("priorities must be finite and >= 0 (check the TD errors for NaN/inf)")
        nodes = idx + self._leaf0
        self._sum[nodes] = vals
        self._min[nodes] = vals
        nodes = np.unique(nodes)  # sorted, so each level's parents are sorted too: dedup neighbours only
        for _ in range(self._depth):
            nodes >>= 1
            if nodes.size > 1:
                nodes = nodes[np.concatenate(([True], nodes[1:] != nodes[:-1]))]
            left, right = 2 * nodes, 2 * nodes + 1
            self._sum[nodes] = self._sum[left] + self._sum[right]
            self._min[nodes] = np.minimum(self._min[left], self._min[right])

    def find_prefixsum(self, values: np.ndarray) -> np.ndarray:
        """For each ``v``, the leaf ``i`` with ``sum(leaves[:i]) <= v < sum(leaves[:i+1])``.

        ``values`` should lie in ``[0, total)``; results are clamped to ``capacity - 1``.
        """
        v = np.array(values, dtype=np.float64).reshape(-1)
        nodes = np.ones(v.shape, dtype=np.int64)
        for _ in range(self._depth):
            left = 2 * nodes
            left_sum = self._sum[left]
            go_right = v >= left_sum
            v -= np.where(go_right, left_sum, 0.0)
            nodes = left + go_right
        return np.minimum(nodes - self._leaf0, self.capacity - 1)

    def sample_stratified(self, batch_size: int, uniforms: np.ndarray) -> np.ndarray:
        """Leaves drawn in proportion to their values, one in each of ``batch_size`` equal slices of the sum.

        Args:
            batch_size: number of leaves to draw.
            uniforms: ``batch_size`` numbers in ``[0, 1)``; query ``i`` is ``(i + uniforms[i]) * total / B``.
        """
        total = self.total
        if total <= 0:
            raise ValueError("cannot sample from a sum tree whose total priority is 0")
        u = np.asarray(uniforms, dtype=np.float64).reshape(-1)
        queries = (np.arange(batch_size, dtype=np.float64) + u) * (total / batch_size)
        return self.find_prefixsum(np.minimum(queries, np.nextafter(total, 0.0)))

    def state_dict(self) -> dict[str, Any]:
        """Both trees as tensors, and the capacity."""
        return {
            "capacity": self.capacity,
            "sum": torch.from_numpy(self._sum.copy()),
            "min": torch.from_numpy(self._min.copy()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (same capacity required)."""
        if int(state["capacity"]) != self.capacity:
            cap = state["capacity"]
            raise ValueError(f"checkpointed sum tree has capacity {cap}, this one {self.capacity}")
        self._sum[:] = torch.as_tensor(state["sum"]).numpy()
        self._min[:] = torch.as_tensor(state["min"]).numpy()
