"""Observations a policy really meets (a random-action rollout), for parity checks of predict and export."""

from __future__ import annotations

import numpy as np

__all__ = ["rollout_observations"]


def rollout_observations(env_id: str, n: int, seed: int) -> np.ndarray:
    """``n`` observations of a random-action rollout of ``env_id`` (reset on episode end), as float32."""
    import gymnasium as gym

    env = gym.make(env_id)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    out = []
    for _ in range(n):
        out.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return np.asarray(out, dtype=np.float32)
