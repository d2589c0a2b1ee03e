"""Steps/s of the worker's vectorizations side by side: gymnasium sync, gymnasium async and envpool.

Breakout (``preset: atari``) and Hopper-v5, 8 envs, seeded random actions, through the plugin's workers (so
the same-step reset and episode accounting are included). Variants alternate A, B, C, A ... per repeat.
Usage: ``python benchmarks/vector_envs.py [--steps N] [--repeats R]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import setup


def steps_per_s(env_id: str, mode: str, steps: int, num_envs: int, **params: object) -> float:
    from rlightning_gymnasium.params import GymnasiumParams
    from rlightning_gymnasium.plugin import make_gymnasium_worker

    w = make_gymnasium_worker(GymnasiumParams(id=env_id, vectorization=mode, **params), num_envs=num_envs,
                              seed=0, worker_index=0)
    rng = np.random.default_rng(0)
    w.reset()
    space = w.action_space
    acts = (rng.integers(0, space.n, size=(steps, num_envs)) if hasattr(space, "n")
            else rng.uniform(-1, 1, size=(steps, num_envs, *space.shape)).astype(np.float32))
    t0 = time.perf_counter()
    for a in acts:
        w.step(a)
    dt = time.perf_counter() - t0
    w.close()
    return steps * num_envs / dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--num-envs", type=int, default=8)
    args = ap.parse_args()
    setup("vector envs: gymnasium sync / async vs envpool")
    modes = ["sync", "async"] + (["envpool"] if importlib.util.find_spec("envpool") else [])
    for env_id, params in (("ALE/Breakout-v5", {"preset": "atari"}), ("Hopper-v5", {})):
        rows: dict[str, list[float]] = {m: [] for m in modes}
        for _ in range(args.repeats):
            for m in modes:
                rows[m].append(steps_per_s(env_id, m, args.steps, args.num_envs, **params))
        base = statistics.median(rows["sync"])
        for m in modes:
            med = statistics.median(rows[m])
            print(f"{env_id:18s} {m:8s} {med:10.0f} env-steps/s  x{med / base:5.2f} vs sync")


if __name__ == "__main__":
    main()
