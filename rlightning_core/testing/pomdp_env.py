"""Partially observable CartPole: the velocities are masked, so acting well needs memory (recurrent policies).

Importing this module registers the Gymnasium id ``CartPoleNoVel-v1``: ``CartPole-v1`` (500-step limit) whose
observations are ``[x, theta]`` only, the cart and pole velocities dropped. The ``gymnasium`` env plugin makes it
from ``id: rlightning_core.testing.pomdp_env:CartPoleNoVel-v1`` in any process (Ray env runners included)::

    env:
      type: gymnasium
      params: {id: "rlightning_core.testing.pomdp_env:CartPoleNoVel-v1"}
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

__all__ = ["ENV_ID", "MaskVelocity", "make_cartpole_no_vel"]

#: The id this module registers (make it with ``rlightning_core.testing.pomdp_env:CartPoleNoVel-v1``).
ENV_ID = "CartPoleNoVel-v1"

#: Indices of CartPole's observation kept: cart position and pole angle.
_KEEP = np.array([0, 2])


class MaskVelocity(gymnasium.ObservationWrapper):
    """Keeps CartPole's position entries ``[x, theta]`` and drops the two velocities."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        box = env.observation_space
        assert isinstance(box, spaces.Box) and box.shape == (4,), "MaskVelocity wraps CartPole (4 observations)"
        self.observation_space = spaces.Box(box.low[_KEEP], box.high[_KEEP], dtype=np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        """``[x, theta]`` of the full observation."""
        return np.asarray(observation, dtype=np.float32)[_KEEP]


def make_cartpole_no_vel(**kwargs: Any) -> gymnasium.Env:
    """``CartPole-v1`` (its 500-step limit) seen through :class:`MaskVelocity`."""
    return MaskVelocity(gymnasium.make("CartPole-v1", **kwargs))


if ENV_ID not in gymnasium.registry:
    gymnasium.register(ENV_ID, entry_point=make_cartpole_no_vel)
