"""Sharded buffer (``cluster.sharded_buffer``): transitions stay in shards inside the env-runner actors.

Each env-runner actor keeps what it collects in its own shard, next to the envs that produced it; only a small
:class:`ShardReceipt` (version, size) travels to the learner with each chunk. The learner reads across shards:

- on-policy (a buffer with ``reset``, e.g. ``rollout``): *gather* — before learning, the learner pulls every
  shard's chunks (then the shards are empty) into its own rollout buffer, exactly as if they had been sent;
- off-policy (``replay``): *sample proportionally to shard sizes* — :class:`ShardedReplay` stands in for the
  buffer in ``policy.learn``: a batch of ``B`` is split over the shards by a multinomial draw weighted by
  their sizes, each shard samples its part, the parts are concatenated. Every transition stored anywhere is
  then equally likely, as with one buffer. Prioritized shards sample by their local priorities, and
  ``update_priorities`` is routed back to the shard each transition came from.

Costs: one round trip per shard per sampled batch (the runner serves it between two chunks), so it pays when
transitions are large (images) or the learner's memory is the limit, not for CartPole-sized data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np
import torch

__all__ = ["ShardReceipt", "ShardedReplay", "batch_to_numpy", "batch_to_torch"]


@attrs.define(slots=True)
class ShardReceipt:
    """What the learner receives instead of a chunk kept in a shard."""

    weight_version: int
    num_steps: int
    num_envs: int
    column: int = 0
    env_label: str = ""


def batch_to_numpy(batch: dict[str, Any]) -> dict[str, np.ndarray]:
    """A sampled batch as numpy arrays (zero-copy through Ray's object store)."""
    return {k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v) for k, v in batch.items()}


def batch_to_torch(batch: dict[str, np.ndarray], device: str = "cpu") -> dict[str, torch.Tensor]:
    """Back to (writable) tensors on ``device``."""
    return {k: torch.tensor(v, device=device) for k, v in batch.items()}


class ShardedReplay:
    """The learner's view of replay shards held by env-runner actors (see the module docstring).

    Args:
        shards: the env-runner actor handles, each holding one replay shard.
        ray: the ``ray`` module.
        device: where sampled batches go (the learner's device).
        timeout_s: longest wait for one shard call.
        by_receipts: count transitions written from the receipts the learner is given (:meth:`add`) instead of
            asking the shards. Data-parallel learners need this: each decides how many updates to make from the
            count, and all of them must make the same number (their gradient all-reduces pair up), while the
            shards keep growing between one rank's question and the next's under the async engine.
    """

    needs_next_obs = True

    def __init__(self, shards: Sequence[Any], ray: Any, *, device: str = "cpu", timeout_s: float = 600.0,
                 by_receipts: bool = False) -> None:
        self.ray = ray
        self.device = device
        self.timeout_s = timeout_s
        self.by_receipts = by_receipts
        self.received = 0
        self.shards: list[Any] = list(shards)
        self.sizes = [0] * len(self.shards)
        self.added = [0] * len(self.shards)
        self._last_split: list[tuple[int, int]] = []
        self.preprocess_fn = None
        self.postprocess_fn = None

    def set_shards(self, shards: Sequence[Any]) -> None:
        """New handles (a restarted runner comes back with an empty shard)."""
        self.shards = list(shards)
        self.refresh()

    def refresh(self) -> None:
        """Fetch every shard's size and transitions written so far."""
        stats = self.ray.get([s.shard_stats.remote() for s in self.shards], timeout=self.timeout_s)
        self.sizes = [int(n) for n, _ in stats]
        self.added = [int(a) for _, a in stats]

    def __len__(self) -> int:
        if self.by_receipts:  # the same on every rank (see by_receipts); the shards may hold a little more
            return self.received
        return int(sum(self.sizes))

    @property
    def total_added(self) -> int:
        """Transitions written into all shards (fresh: the update schedule reads this first)."""
        if self.by_receipts:
            return self.received
        self.refresh()
        return int(sum(self.added))

    def add(self, chunk: Any) -> None:
        """Chunks go into the shards in the runners; only receipts reach the learner (counted ``by_receipts``)."""
        if self.by_receipts and isinstance(chunk, ShardReceipt):
            self.received += int(chunk.num_steps) * int(chunk.num_envs)

    def sample(self, batch_size: int, generator: torch.Generator | None = None, *,
               beta: float | None = None) -> dict[str, torch.Tensor]:
        """``batch_size`` transitions drawn across shards in proportion to their sizes."""
        sizes = torch.tensor(self.sizes, dtype=torch.float64)
        if float(sizes.sum()) <= 0:
            self.refresh()
            sizes = torch.tensor(self.sizes, dtype=torch.float64)
            if float(sizes.sum()) <= 0:
                raise RuntimeError("ShardedReplay.sample() called while every shard is empty")
        picks = torch.multinomial(sizes / sizes.sum(), batch_size, replacement=True, generator=generator)
        counts = torch.bincount(picks, minlength=len(self.shards)).tolist()
        seeds = torch.randint(0, 2**31 - 1, (len(self.shards),), generator=generator).tolist()
        split = [(i, int(c)) for i, c in enumerate(counts) if c > 0]
        refs = [self.shards[i].shard_sample.remote(c, int(seeds[i]), beta) for i, c in split]
        parts = self.ray.get(refs, timeout=self.timeout_s)
        for (i, _), (_, size, added) in zip(split, parts, strict=True):
            self.sizes[i], self.added[i] = int(size), int(added)
        self._last_split = split
        keys = parts[0][0].keys()
        merged = {k: np.concatenate([p[0][k] for p in parts]) for k in keys}
        return batch_to_torch(merged, self.device)

    def update_priorities(self, indices: Any, td_errors: Any) -> None:
        """Send each shard the new priorities of the transitions it contributed to the last batch."""
        idx = np.asarray(indices.detach().cpu() if isinstance(indices, torch.Tensor) else indices)
        td = np.asarray(td_errors.detach().cpu() if isinstance(td_errors, torch.Tensor) else td_errors)
        start = 0
        for i, count in self._last_split:
            self.shards[i].shard_update_priorities.remote(idx[start: start + count], td[start: start + count])
            start += count

    def set_progress(self, progress: float) -> None:
        """Forward the training progress (prioritized beta annealing) to every shard."""
        for s in self.shards:
            s.shard_set_progress.remote(progress)

    def state_dict(self) -> dict[str, Any]:
        """Shard contents stay with the runners and are not checkpointed (resuming starts empty shards)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore (see :meth:`state_dict`)."""
