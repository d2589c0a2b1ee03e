"""The learner actor: a policy of role ``LEARNER`` and the data buffer it learns from.

A plain class (``ray.remote`` is applied by :mod:`rlightning_core.distributed.execution`), also used in the
driver process when ``cluster.num_learners`` is 0. It loads exactly the driver's plugin set before resolving any
name and returns numpy arrays, never tensors.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlightning_core.distributed.collective_member import CollectiveMember
from rlightning_core.distributed.collective_member import load_plugins as _load_plugins
from rlightning_core.weights.fingerprint import fingerprint

__all__ = ["LearnerActor"]


class LearnerActor(CollectiveMember):
    """The learner (a policy of role ``LEARNER``) and the data buffer it learns from, in one actor.

    With ``world_size`` > 1 it is rank ``rank`` of a data-parallel group (:meth:`init_data_parallel`): it
    stores its equal slice of every chunk's env columns (its buffer is a shard) and averages gradients with
    the other ranks. Rank 0 is the weight-sync source and the one whose state is checkpointed.
    """

    def __init__(self, policy_cfg: Any, *, selection: Sequence[str], seed: int, num_threads: int = 1,
                 rank: int = 0, world_size: int = 1, offload: bool = False, plugins: Any = None) -> None:
        """A learner for ``policy_cfg`` (built by :meth:`build` once the spaces are known)."""
        import torch  # the expensive part of start-up, overlapped with the env actors' own

        self.num_threads = num_threads
        torch.set_num_threads(num_threads)
        # in the driver (cluster.num_learners: 0) the driver's plugin set is passed in; an actor loads its own
        self.plugins = plugins if plugins is not None else _load_plugins(selection)
        self.policy_cfg, self.seed = policy_cfg, seed
        self.rank, self.world_size = rank, world_size
        self.policy: Any = None
        self.buffer: Any = None
        self.dp: Any = None
        self._dp_store: Any = None
        self.offload = offload
        self.offloaded = False

    def build(self, observation_space: Any, action_space: Any) -> dict[str, Any]:
        """Build the learner policy once the env spaces are known; returns its extras spec."""
        import torch

        from rlightning_core.policy.base import PolicyRole
        from rlightning_core.policy.group import resolve_device
        torch.set_num_threads(self.num_threads)
        cfg = self.policy_cfg
        self.policy = self.plugins.registry.resolve("policy", cfg.type).build(
            cfg.params, observation_space=observation_space, action_space=action_space, role=PolicyRole.LEARNER,
            device=resolve_device(cfg.device), seed=self.seed)
        from rlightning_core.policy.numerics import NumericGuard

        self.policy.numerics = NumericGuard(getattr(cfg, "nan_policy", "raise"))
        return self.extras_spec()

    def pid(self) -> int:
        """The actor's process id."""
        return os.getpid()

    def extras_spec(self) -> dict[str, Any]:
        """What the rollout side must record for this policy."""
        return dict(self.policy.extras_spec)

    def bind_buffer(self, buffer_type: str, buffer_params: Any, spec: Any) -> bool:
        """Allocate the buffer next to the learner; returns whether chunks must carry ``next_obs``."""
        self.buffer = self.plugins.registry.resolve("buffer", buffer_type).build(buffer_params, spec=spec)
        return bool(self.buffer.needs_next_obs)

    def _sync_modules(self) -> dict[str, Any]:
        return self.policy.rollout_modules()

    def _weights_holder(self) -> Any:
        return self.policy

    # -- data parallelism ----------------------------------------------------------------------------------
    def init_data_parallel(self, addr: str, port: int, backend: str, bucket_bytes: int,
                           timeout_s: float = 120.0) -> float:
        """Join the learners' group, adopt rank 0's initial parameters; returns a parameter checksum."""
        from rlightning_core.distributed.data_parallel import DataParallelGroup, make_process_group
        from rlightning_core.weights.buckets import named_tensors

        if self.dp is not None:
            self.dp.close()
        self._dp_store, pg = make_process_group(backend, addr, port, self.rank, self.world_size, timeout_s)
        params = [p for opt in self.policy.optimizers().values() if opt is not None
                  for group in opt.param_groups for p in group["params"]]
        self.dp = DataParallelGroup(pg, params, bucket_bytes)
        self.dp.broadcast_(list(named_tensors(self.policy.modules()).values()))
        self.policy.data_parallel = self.dp
        return float(sum(t.double().sum() for t in named_tensors(self.policy.modules()).values()))

    def _shard(self, chunk: Any) -> Any:
        from rlightning_core.distributed.data_parallel import shard_chunk

        return shard_chunk(chunk, self.rank, self.world_size)

    def buffer_size(self) -> int:
        """Transitions the buffer holds."""
        return len(self.buffer)

    def buffer_kind(self) -> str:
        """``on_policy`` (the buffer is emptied after every learn) or ``off_policy``."""
        return "on_policy" if hasattr(self.buffer, "reset") else "off_policy"

    def attach_shards(self, runners: Sequence[Any], on_policy: bool, timeout_s: float = 600.0) -> None:
        """Read transitions from the runners' shards: gather them (on-policy) or sample across them."""
        import ray

        from rlightning_core.buffer.sharded import ShardedReplay

        self.gather_from = list(runners) if on_policy else None
        if not on_policy:
            if isinstance(self.buffer, ShardedReplay):
                self.buffer.set_shards(runners)
            else:
                self.buffer = ShardedReplay(runners, ray, device=str(self.policy.device), timeout_s=timeout_s,
                                            by_receipts=self.world_size > 1)

    def _incoming(self, chunks: Sequence[Any]) -> list[Any]:
        """This rank's slices of the chunks to store.

        Gathered from the shards (each runner slices them for the rank), or of those sent; receipts are data
        only to a data-parallel rank's shard view, which counts them.
        """
        from rlightning_core.buffer.sharded import ShardReceipt

        gather_from: list[Any] | None = getattr(self, "gather_from", None)
        if gather_from:
            import ray

            gathered = ray.get([r.shard_gather.remote(self.rank) for r in gather_from])
            return [c for part in gathered for c in part]
        if getattr(self.buffer, "by_receipts", False):  # replay shards: the receipts count what was written
            return list(chunks)
        return [self._shard(c) for c in chunks if not isinstance(c, ShardReceipt)]

    def gradients(self, loss_fn: Any, batch: Any) -> dict[str, np.ndarray]:
        """Gradients of ``loss_fn(policy, batch)`` after the data-parallel averaging (tests compare them)."""
        for opt in self.policy.optimizers().values():
            if opt is not None:
                opt.zero_grad(set_to_none=True)
        loss_fn(self.policy, batch).backward()
        out: dict[str, np.ndarray] = {}
        for mname, module in sorted(self.policy.modules().items()):
            for key, param in module.named_parameters():
                if param.grad is not None:
                    out[f"{mname}.{key}"] = param.grad.detach().cpu().numpy().copy()
        return out

    # -- offload -------------------------------------------------------------------------------------------
    def offload_idle(self) -> bool:
        """``cluster.offload``: move the idle model and optimizer state to host memory (after a sync).

        Returns whether anything moved (``False`` on CPU, where it is a logged no-op).
        """
        from rlightning_core.distributed.offload import move_policy, offload_wanted

        if not self.offload or self.offloaded or not offload_wanted(self.policy.device):
            return False
        self._flat = []  # the GPU buckets would keep the memory alive; rebuilt when the state comes back
        move_policy(self.policy, "cpu")
        self.offloaded = True
        return True

    def broadcast_weights(self, version: int) -> dict[str, float]:
        """Send the weights (bringing offloaded state back first)."""
        self._before_learn()
        return super().broadcast_weights(version)

    def _before_learn(self) -> None:
        """Bring offloaded state back to the learner's device (and re-point the weight-sync buckets)."""
        if not self.offloaded:
            return
        from rlightning_core.distributed.offload import move_policy

        move_policy(self.policy, self.policy.device)
        if self._group_ready:
            self._flat = self._layout.flatten_in_place(self._sync_modules())
        self.offloaded = False

    def learn(self, progress: float, *chunks: Any, with_weights: bool = False) -> Any:
        """Store the chunks (Ray resolved the refs; a data-parallel rank its slice), learn, reset on-policy data.

        Returns the metrics, or ``(metrics, weights, fingerprint)`` with ``with_weights``: a small policy's new
        weights ride the reply, so the driver can send them on without another transfer (and check the copies
        against the fingerprint).
        """
        self._before_learn()
        for chunk in self._incoming(chunks):
            self.buffer.add(chunk)
        metrics = self.policy.learn(self.buffer, progress=progress)
        if hasattr(self.buffer, "reset"):
            self.buffer.reset()
        if not with_weights:
            return metrics
        weights = self.policy.get_weights()
        return metrics, weights, fingerprint(weights)

    def learn_chunks(self, progress: float, version: int, max_staleness: int | None, *chunks: Any) -> dict[str, Any]:
        """Store the chunks whose policy lag (``version`` minus the chunk's) is within ``max_staleness``, learn.

        The async engine's learner step. Returns ``metrics`` (the policy's), ``lags`` (of the chunks stored),
        ``dropped`` (chunks refused as too stale) and ``busy_s`` (seconds spent storing and learning).
        """
        from rlightning_core.buffer.sharded import ShardReceipt

        t0 = time.perf_counter()
        if self.buffer_kind() == "on_policy":
            learned, kept, stale = self._learn_rollouts(progress, version, max_staleness, chunks)
            return {"metrics": learned, "lags": kept, "dropped": stale, "busy_s": time.perf_counter() - t0}
        lags: list[int] = []
        dropped = 0
        for chunk in chunks:
            lag = int(version) - int(chunk.weight_version)
            if isinstance(chunk, ShardReceipt):  # already in a shard: measured, not droppable
                if getattr(self.buffer, "by_receipts", False):  # data-parallel ranks count what was written
                    self.buffer.add(chunk)
                lags.append(lag)
                continue
            if max_staleness is not None and lag > max_staleness:
                dropped += 1
                continue
            self.buffer.add(self._shard(chunk))
            lags.append(lag)
        self._before_learn()
        metrics = self.policy.learn(self.buffer, progress=progress)
        return {"metrics": metrics, "lags": lags, "dropped": dropped, "busy_s": time.perf_counter() - t0}

    def _learn_rollouts(self, progress: float, version: int, max_staleness: int | None,
                        chunks: Sequence[Any]) -> tuple[dict[str, float], list[int], int]:
        """The async engine with an on-policy buffer: whole rollouts assembled from chunks as they arrive.

        Chunks wait until every column of the buffer holds one; each complete set is learned from and the buffer
        emptied, as in one process (:class:`~rlightning_core.engine.assembly.RolloutAssembly`). Data-parallel
        ranks get the same chunks (sharded: they gather exactly the chunks their receipts name), so they learn
        equally often and their all-reduces pair up. Returns (metrics, lags, dropped); ``stats/updates`` is 0
        when no rollout was complete yet.
        """
        from rlightning_core.buffer.sharded import ShardReceipt
        from rlightning_core.engine.assembly import RolloutAssembly

        gather_from: list[Any] | None = getattr(self, "gather_from", None)
        if gather_from:
            import ray

            counts: dict[int, int] = {}
            for c in chunks:
                if isinstance(c, ShardReceipt):
                    counts[int(c.column)] = counts.get(int(c.column), 0) + 1
            parts = ray.get([r.shard_gather.remote(self.rank, counts) for r in gather_from])
            incoming = [c for part in parts for c in part]
        else:
            incoming = [self._shard(c) for c in chunks if not isinstance(c, ShardReceipt)]
        if not hasattr(self, "_assembly"):
            self._assembly = RolloutAssembly()

        def learn(buffer: Any) -> dict[str, float]:
            self._before_learn()
            return self.policy.learn(buffer, progress=progress)

        out = self._assembly.feed(self.buffer, incoming, version=version, max_staleness=max_staleness, learn=learn)
        return out["metrics"], out["lags"], out["dropped"]

    def get_weights(self) -> dict[str, np.ndarray]:
        """Numpy copies of the weights (object-store strategy, evaluation, tests)."""
        return self.policy.get_weights()

    def weights_and_fingerprint(self) -> tuple[dict[str, np.ndarray], Any]:
        """:meth:`get_weights` and their fingerprint (two returns: the weights go on by reference)."""
        weights = self.policy.get_weights()
        return weights, fingerprint(weights)

    def weights_nbytes(self) -> int:
        """Bytes of the weights a sync sends (every tensor of the state dicts of the policy's rollout modules)."""
        from rlightning_core.weights.buckets import named_tensors

        return int(sum(t.numel() * t.element_size() for t in named_tensors(self._sync_modules()).values()))

    def state_dict(self) -> dict[str, Any]:
        """The learner's state (tensors) and the buffer's."""
        return {"learner": self.policy.state_dict(), "buffer": self.buffer.state_dict()}

    def buffer_state(self) -> dict[str, Any]:
        """This rank's buffer (shard) state."""
        return self.buffer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (``buffer`` ``None``: keep the empty buffer)."""
        self.policy.load_state_dict(state["learner"])
        if state["buffer"] is not None:
            self.buffer.load_state_dict(state["buffer"])

    def close(self) -> None:
        """Release the process groups."""
        if self.dp is not None:
            self.dp.close()
        self.leave_collective()
