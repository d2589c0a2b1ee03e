"""Data-parallel learners: a torch.distributed group of learner ranks that average gradients.

Why hooks instead of ``DistributedDataParallel``: the plugins' ``learn`` methods own their modules, losses and
optimizers (PPO: one actor-critic; SAC: actor, critics, temperature), and wrapping their modules in DDP would
mean rewriting every plugin. Instead, every parameter an optimizer steps gets a post-accumulate-grad hook; the
first hook of a backward pass queues a callback that runs when the whole backward pass has finished, and that
callback all-reduces (averages) the gradients the pass produced, flattened in size-bounded buckets. So by the
time a plugin clips gradients or calls ``optimizer.step()``, every rank holds the same averaged gradient, which
is the gradient of the mean loss over the combined batch when the shards are equally sized.

Averaging after every backward pass is linear, so gradient accumulation over several passes stays exact.
The group is a standalone process group (its own ``TCPStore``), so it coexists with the weight-sync group,
which is the default process group of learner rank 0 and the rollout workers.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from typing import Any

import torch

__all__ = ["DataParallelGroup", "make_process_group", "shard_chunk"]


def make_process_group(backend: str, addr: str, port: int, rank: int, world_size: int,
                       timeout_s: float = 120.0) -> tuple[Any, Any]:
    """A standalone ``(store, process_group)`` of ``world_size`` ranks (rank 0 hosts the store)."""
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(addr, port, world_size, rank == 0, timeout=timeout)
    pg: Any
    if backend == "nccl":
        nccl: Any = dist.ProcessGroupNCCL
        pg = nccl(store, rank, world_size)
    else:
        pg = dist.ProcessGroupGloo(store, rank, world_size, timeout)
    return store, pg


def shard_chunk(chunk: Any, rank: int, world_size: int) -> Any:
    """Rank ``rank``'s equal slice of a chunk's env columns, re-addressed into that learner's buffer shard.

    A chunk of ``N`` envs at global column ``c0`` gives learner ``r`` columns ``r*N/W .. (r+1)*N/W - 1``, which
    land at column ``c0/W`` of its shard: every learner stores the same number of transitions per chunk (so
    their update schedules, and thus their collective calls, stay in step).
    """
    import attrs

    n = chunk.num_envs
    if world_size == 1:
        return chunk
    if n % world_size or int(chunk.column) % world_size:
        raise ValueError(f"a chunk of {n} envs at column {chunk.column} cannot be split over {world_size} learners")
    per = n // world_size
    lo, hi = rank * per, (rank + 1) * per
    return attrs.evolve(
        chunk, data={k: v[:, lo:hi] for k, v in chunk.data.items()}, last_obs=chunk.last_obs[lo:hi],
        last_values=None if chunk.last_values is None else chunk.last_values[lo:hi],
        column=int(chunk.column) // world_size)


class DataParallelGroup:
    """Averages the gradients of ``params`` across the ranks of ``pg`` at the end of every backward pass.

    Args:
        pg: a process group (``make_process_group``).
        params: the parameters to keep in step (the optimizers' parameters), in the same order on every rank.
        bucket_bytes: largest flattened bucket of one all-reduce.
    """

    def __init__(self, pg: Any, params: Iterable[torch.Tensor], bucket_bytes: int = 64 << 20) -> None:
        self.pg = pg
        self.world_size = int(pg.size())
        self.rank = int(pg.rank())
        self.bucket_bytes = int(bucket_bytes)
        self.params: list[torch.Tensor] = []
        seen: set[int] = set()
        for p in params:
            if id(p) not in seen and p.requires_grad:
                seen.add(id(p))
                self.params.append(p)
        self._index = {id(p): i for i, p in enumerate(self.params)}
        self._touched: set[int] = set()
        self._queued = False
        self._handles = [p.register_post_accumulate_grad_hook(self._on_grad) for p in self.params]

    # -- hooks ---------------------------------------------------------------------------------------------
    def _on_grad(self, param: torch.Tensor) -> None:
        self._touched.add(self._index[id(param)])
        if not self._queued:
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._reduce)

    def _reduce(self) -> None:
        touched, self._touched, self._queued = sorted(self._touched), set(), False
        grads: list[torch.Tensor] = []
        for i in touched:
            grad = self.params[i].grad
            if grad is not None:
                grads.append(grad)
        self.all_reduce_mean_(grads)

    # -- collectives ---------------------------------------------------------------------------------------
    def all_reduce_mean_(self, tensors: Sequence[torch.Tensor]) -> None:
        """Average ``tensors`` across ranks in place, flattened into buckets of one dtype and device each."""
        import torch.distributed as dist

        groups: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
        for t in tensors:
            groups.setdefault((t.dtype, t.device), []).append(t)
        for (dtype, _), ts in groups.items():
            itemsize = torch.empty((), dtype=dtype).element_size()
            buckets: list[list[torch.Tensor]] = [[]]
            size = 0
            for t in ts:
                if buckets[-1] and (size + t.numel()) * itemsize > self.bucket_bytes:
                    buckets.append([])
                    size = 0
                buckets[-1].append(t)
                size += t.numel()
            for bucket in buckets:
                if not bucket:
                    continue
                flat = torch.cat([b.reshape(-1) for b in bucket])
                opts: Any = dist.AllreduceOptions()
                opts.reduceOp = dist.ReduceOp.SUM
                self.pg.allreduce([flat], opts).wait()
                flat.div_(self.world_size)
                offset = 0
                for b in bucket:
                    b.copy_(flat[offset: offset + b.numel()].view_as(b))
                    offset += b.numel()

    def broadcast_(self, tensors: Sequence[torch.Tensor], src: int = 0) -> None:
        """Overwrite ``tensors`` on every rank with rank ``src``'s values (initial parameters)."""
        import torch.distributed as dist

        for t in tensors:
            opts = dist.BroadcastOptions()
            opts.rootRank = src
            buf = t.detach().contiguous()
            self.pg.broadcast([buf], opts).wait()
            if buf.data_ptr() != t.data_ptr():
                with torch.no_grad():
                    t.copy_(buf)

    @property
    def device(self) -> torch.device:
        """Where scalars for collectives live (nccl reduces GPU tensors only)."""
        return self.params[0].device if self.params else torch.device("cpu")

    def mean(self, value: float | torch.Tensor) -> float:
        """The mean of a scalar across ranks (e.g. an early-stopping statistic every rank must agree on)."""
        t = torch.tensor([float(value)], dtype=torch.float64, device=self.device)
        self.all_reduce_mean_([t])
        return float(t.item())

    def close(self) -> None:
        """Remove the hooks."""
        for h in self._handles:
            h.remove()
        self._handles = []
