"""The spaces PPO supports (torch-free: the numpy rollout copy checks them too)."""

from __future__ import annotations

from typing import Any

import numpy as np


def space_info(observation_space: Any, action_space: Any) -> tuple[int, int, bool]:
    """``(flat observation size, action size or count, discrete)``; a clear error for unsupported spaces."""
    from gymnasium import spaces

    if not isinstance(observation_space, spaces.Box):
        raise TypeError(f"ppo needs a Box observation space (vectors, or (C, H, W) uint8 images), got "
                        f"{observation_space}")
    obs_dim = int(np.prod(observation_space.shape))
    if isinstance(action_space, spaces.Discrete):
        return obs_dim, int(action_space.n), True
    if isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
        return obs_dim, int(action_space.shape[0]), False
    raise TypeError(f"ppo supports Discrete and 1-D Box action spaces, got {action_space}")
