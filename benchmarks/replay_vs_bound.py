"""ReplayBuffer insert and sample throughput against the bound: plain indexing of tensors of the same size.

The bound is what no replay buffer can beat on this machine: the same fields, preallocated as torch tensors
of the same capacity on the same device, written by one slice ``copy_`` per field (insert) and read by one
``torch.randint`` draw and one ``index_select`` per field (sample) — no validation, no n-step bookkeeping, no
importance weights, no Python object per transition. Both sides move the same bytes.

- insert: chunks of ``T x N`` transitions (``--chunk`` steps x ``--envs`` envs, default 64 x 8 = 512) into a
  buffer of ``--capacity`` (default 1,000,000), wrapping around;
- sample: batches of 256 (``--batch``) from a full buffer, as tensors on the buffer's device; uniform (and
  prioritized, whose sum-tree draw the bound has no counterpart for — reported for reference).

Two shapes: Pendulum-sized (obs 3, action 1) and MuJoCo-sized (obs 17, action 6). Best of ``--repeats``
timings each, one torch thread. Ratios are ReplayBuffer / bound (1.0 = as fast as plain indexing).

Run: ``python benchmarks/replay_vs_bound.py [--capacity 1000000] [--device cpu]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from gymnasium import spaces

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import setup

from rlightning_core.buffer.base import BufferSpec, Chunk
from rlightning_core.buffer.params import ReplayBufferParams
from rlightning_core.buffer.replay import ReplayBuffer


def spec_for(obs_dim: int, act_dim: int, envs: int, chunk: int) -> BufferSpec:
    return BufferSpec(observation_space=spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
                      action_space=spaces.Box(-1.0, 1.0, (act_dim,), np.float32), num_envs=envs, num_steps=chunk)


def make_chunks(obs_dim: int, act_dim: int, envs: int, steps: int, count: int) -> list[Chunk]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        obs = rng.normal(size=(steps, envs, obs_dim)).astype(np.float32)
        out.append(Chunk(data={"obs": obs, "next_obs": obs + 0.1,
                               "actions": rng.uniform(-1, 1, (steps, envs, act_dim)).astype(np.float32),
                               "rewards": rng.normal(size=(steps, envs)).astype(np.float32),
                               "terminated": rng.random((steps, envs)) < 0.005,
                               "truncated": rng.random((steps, envs)) < 0.005}, last_obs=obs[-1]))
    return out


class Bound:
    """Preallocated tensors of the ReplayBuffer's layout; slice writes, randint + index_select reads."""

    def __init__(self, buffer: ReplayBuffer) -> None:
        storage = buffer.storage
        self.device = storage.device
        self.capacity = storage.capacity
        self.tensors = {name: torch.zeros_like(t) for name, t in storage.tensors.items()}  # type: ignore[attr-defined]
        self.cursor = self.size = 0

    def add(self, chunk: Chunk) -> None:
        d = chunk.data
        t, n = d["rewards"].shape
        count = t * n
        fields = {"obs": d["obs"], "next_obs": d["next_obs"], "actions": d["actions"], "rewards": d["rewards"],
                  "terminated": d["terminated"], "discount": d["rewards"]}
        start = self.cursor
        first = min(count, self.capacity - start)
        for name, dst in self.tensors.items():
            src = torch.from_numpy(fields[name]).reshape(count, *dst.shape[1:])
            dst[start:start + first].copy_(src[:first])
            if first < count:
                dst[:count - first].copy_(src[first:])
        self.cursor = (start + count) % self.capacity
        self.size = min(self.size + count, self.capacity)

    def sample(self, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
        idx = torch.randint(0, self.size, (batch,), generator=generator).to(self.device)
        return {name: torch.index_select(t, 0, idx) for name, t in self.tensors.items()}


def best_rate(fn: Callable[[], object], items: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return items / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=1_000_000, help="transitions (default 1,000,000)")
    parser.add_argument("--chunk", type=int, default=64, help="steps per inserted chunk (default 64)")
    parser.add_argument("--envs", type=int, default=8, help="envs per inserted chunk (default 8)")
    parser.add_argument("--batch", type=int, default=256, help="sample batch size (default 256)")
    parser.add_argument("--inserts", type=int, default=200, help="chunks per insert timing (default 200)")
    parser.add_argument("--samples", type=int, default=2000, help="batches per sample timing (default 2000)")
    parser.add_argument("--repeats", type=int, default=3, help="timings per cell, best kept (default 3)")
    parser.add_argument("--device", default="cpu", help="storage device (default cpu)")
    args = parser.parse_args()
    setup("ReplayBuffer vs plain tensor indexing (the bound)")
    torch.set_num_threads(1)
    per_chunk = args.chunk * args.envs
    print(f"  capacity {args.capacity:,}, device {args.device}, chunks of {args.chunk} x {args.envs} = {per_chunk} "
          f"transitions, batches of {args.batch}")
    print(f"\n  {'shape':<22}{'operation':<30}{'ReplayBuffer/s':>16}{'bound/s':>16}{'ratio':>8}")
    for label, obs_dim, act_dim in (("pendulum (3, 1)", 3, 1), ("mujoco (17, 6)", 17, 6)):
        spec = spec_for(obs_dim, act_dim, args.envs, args.chunk)
        chunks = make_chunks(obs_dim, act_dim, args.envs, args.chunk, 8)

        def replay(spec: BufferSpec = spec, **extra: object) -> ReplayBuffer:
            return ReplayBuffer(ReplayBufferParams(capacity=args.capacity, storage_device=args.device, **extra),
                                spec=spec)

        def inserts(target: ReplayBuffer | Bound, chunks: list[Chunk] = chunks) -> None:
            for i in range(args.inserts):
                target.add(chunks[i % len(chunks)])

        for name, extra in (("insert, 1-step", {}), ("insert, 3-step", {"n_step": 3}),
                            ("insert, prioritized", {"prioritized": True})):
            buffer = replay(**extra)
            bound = Bound(buffer)
            ours = best_rate(lambda b=buffer: inserts(b), args.inserts * per_chunk, args.repeats)
            ref = best_rate(lambda b=bound: inserts(b), args.inserts * per_chunk, args.repeats)
            print(f"  {label:<22}{name:<30}{ours:>16,.0f}{ref:>16,.0f}{ours / ref:>8.2f}", flush=True)

        for name, extra in (("sample, uniform", {}), ("sample, prioritized (ref.)", {"prioritized": True})):
            buffer = replay(**extra)
            while len(buffer) < args.capacity:
                buffer.add(chunks[len(buffer) // per_chunk % len(chunks)])
            bound = Bound(buffer)
            for chunk_ in chunks:
                bound.add(chunk_)
            bound.size = args.capacity
            gen_a, gen_b = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
            ours = best_rate(lambda b=buffer, g=gen_a: [b.sample(args.batch, g) for _ in range(args.samples)],
                             args.samples * args.batch, args.repeats)
            ref = best_rate(lambda b=bound, g=gen_b: [b.sample(args.batch, g) for _ in range(args.samples)],
                            args.samples * args.batch, args.repeats)
            print(f"  {label:<22}{name:<30}{ours:>16,.0f}{ref:>16,.0f}{ours / ref:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
