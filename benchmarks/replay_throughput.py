"""ReplayBuffer throughput against a naive Python replay measured in the same run.

Insert: chunks of 1000 transitions (T=125 steps x N=8 envs), CartPole-sized observations (4 floats) and
MuJoCo-sized ones (17 floats), 1-step and 3-step returns. Sample: batches of 256 as tensors, uniform and
prioritized (the latter also with the learner's ``update_priorities`` call after every batch).

The reference is the replay memory of the PyTorch DQN tutorial: a ``collections.deque(maxlen=capacity)``
of per-transition tuples filled one ``append`` at a time, sampled with ``random.sample`` and stacked into
tensors. Buffer construction is not timed. Best of 3 runs each.

Run: ``python benchmarks/replay_throughput.py [--capacity 100000] [--batches 2000]``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rlightning_core.buffer.base import BufferSpec, Chunk
from rlightning_core.buffer.params import ReplayBufferParams
from rlightning_core.buffer.replay import ReplayBuffer

T, N = 125, 8  # 1000 transitions per chunk
BATCH = 256


def make_chunks(obs_dim: int, count: int, seed: int = 0) -> list[Chunk]:
    rng = np.random.default_rng(seed)
    chunks = []
    for _ in range(count):
        obs = rng.normal(size=(T, N, obs_dim)).astype(np.float32)
        data = {
            "obs": obs,
            "next_obs": obs + 0.1,
            "actions": rng.integers(0, 2, size=(T, N)),
            "rewards": np.ones((T, N), np.float32),
            "terminated": rng.random((T, N)) < 0.01,
            "truncated": rng.random((T, N)) < 0.005,
        }
        chunks.append(Chunk(data=data, last_obs=obs[-1]))
    return chunks


def make_buffer(obs_dim: int, capacity: int, **params) -> ReplayBuffer:
    spec = BufferSpec(observation_space=spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
                      action_space=spaces.Discrete(2), num_envs=N, num_steps=T)
    return ReplayBuffer(ReplayBufferParams(capacity=capacity, **params), spec=spec)


class NaiveReplay:
    """The PyTorch DQN tutorial's ReplayMemory: a deque of tuples, random.sample, stack to tensors."""

    def __init__(self, capacity: int) -> None:
        self.memory: deque[tuple] = deque(maxlen=capacity)

    def add(self, chunk: Chunk) -> None:
        d = chunk.data
        for t in range(T):
            for j in range(N):
                self.memory.append((d["obs"][t, j], d["actions"][t, j], d["rewards"][t, j],
                                    d["next_obs"][t, j], d["terminated"][t, j]))

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        obs, actions, rewards, next_obs, done = zip(*random.sample(self.memory, batch_size), strict=True)
        return {
            "obs": torch.from_numpy(np.stack(obs)),
            "actions": torch.tensor(actions, dtype=torch.int64),
            "rewards": torch.tensor(rewards, dtype=torch.float32),
            "next_obs": torch.from_numpy(np.stack(next_obs)),
            "terminated": torch.tensor(done, dtype=torch.float32),
        }

    def __len__(self) -> int:
        return len(self.memory)


def rate(fn: Callable[[Any], object], items: int, setup: Callable[[], Any] = lambda: None,
         repeats: int = 3) -> float:
    """Best-of-``repeats`` items per second of ``fn(setup())``, timing ``fn`` only."""
    best = float("inf")
    for _ in range(repeats):
        arg = setup()
        start = time.perf_counter()
        fn(arg)
        best = min(best, time.perf_counter() - start)
    return items / best


def sample_and_update(buffer: ReplayBuffer, batches: int) -> None:
    td_errors = torch.rand(BATCH)
    for _ in range(batches):
        buffer.update_priorities(buffer.sample(BATCH)["indices"], td_errors)


def fill(buffer: ReplayBuffer | NaiveReplay, chunks: list[Chunk]) -> None:
    for chunk in chunks:
        buffer.add(chunk)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=100_000, help="replay capacity (transitions)")
    parser.add_argument("--chunks", type=int, default=50, help="chunks of 1000 transitions per insert run")
    parser.add_argument("--batches", type=int, default=1000, help="batches of 256 per sample run")
    args = parser.parse_args()
    torch.set_num_threads(1)
    random.seed(0)
    n_ins = args.chunks * T * N
    print(f"replay throughput: capacity {args.capacity:,}, {n_ins:,} transitions per insert run "
          f"(chunks of {T * N}), {args.batches} batches of {BATCH}; torch {torch.__version__}, 1 thread")

    print(f"\n{'insert':<36}{'transitions/s':>16}{'vs naive':>10}")
    for obs_dim in (4, 17):
        chunks = make_chunks(obs_dim, args.chunks)
        naive = rate(lambda b, c=chunks: fill(b, c), n_ins, lambda: NaiveReplay(args.capacity))
        print(f"{f'naive deque, obs {obs_dim}':<36}{naive:>16,.0f}{1.0:>10.2f}")
        for label, params in (("uniform, 1-step", {}), ("uniform, 3-step", {"n_step": 3}),
                              ("prioritized, 1-step", {"prioritized": True})):
            ours = rate(lambda b, c=chunks: fill(b, c), n_ins,
                        lambda p=params, d=obs_dim: make_buffer(d, args.capacity, **p))
            print(f"{f'ReplayBuffer {label}, obs {obs_dim}':<36}{ours:>16,.0f}{ours / naive:>10.2f}")

    print(f"\n{'sample (batch 256, as tensors)':<36}{'transitions/s':>16}{'vs naive':>10}")
    n_samp = args.batches * BATCH
    for obs_dim in (4, 17):
        chunks = make_chunks(obs_dim, max(1, args.capacity // (T * N)))
        naive_buf = NaiveReplay(args.capacity)
        fill(naive_buf, chunks)
        naive = rate(lambda _, b=naive_buf: [b.sample(BATCH) for _ in range(args.batches)], n_samp)
        print(f"{f'naive random.sample, obs {obs_dim}':<36}{naive:>16,.0f}{1.0:>10.2f}")
        uniform = make_buffer(obs_dim, args.capacity)
        fill(uniform, chunks)
        ours = rate(lambda _, b=uniform: [b.sample(BATCH) for _ in range(args.batches)], n_samp)
        print(f"{f'ReplayBuffer uniform, obs {obs_dim}':<36}{ours:>16,.0f}{ours / naive:>10.2f}")
        prio = make_buffer(obs_dim, args.capacity, prioritized=True)
        fill(prio, chunks)
        ours = rate(lambda _, b=prio: [b.sample(BATCH) for _ in range(args.batches)], n_samp)
        print(f"{f'ReplayBuffer prioritized, obs {obs_dim}':<36}{ours:>16,.0f}{ours / naive:>10.2f}")
        ours = rate(lambda _, b=prio: sample_and_update(b, args.batches), n_samp)
        print(f"{f'  + update_priorities, obs {obs_dim}':<36}{ours:>16,.0f}{ours / naive:>10.2f}")


if __name__ == "__main__":
    main()
