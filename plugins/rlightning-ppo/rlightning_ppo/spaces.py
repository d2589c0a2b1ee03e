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
    from rlightning_core.spaces import ACTION_MASK, FlatDict

    if isinstance(observation_space, FlatDict) and observation_space.has_action_mask:
        size = observation_space.layout[ACTION_MASK][1]
        if not isinstance(action_space, spaces.Discrete):
            raise TypeError(f"ppo: action masking (the observation key {ACTION_MASK!r}) needs a Discrete action "
                            f"space, got {action_space}")
        if size != int(action_space.n):
            raise TypeError(f"ppo: the {ACTION_MASK!r} key has {size} entries for {action_space}; it needs one "
                            "per action")
    if isinstance(action_space, spaces.Discrete):
        return obs_dim, int(action_space.n), True
    if isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
        return obs_dim, int(action_space.shape[0]), False
    raise TypeError(f"ppo supports Discrete and 1-D Box action spaces, got {action_space}")
