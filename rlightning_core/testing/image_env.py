"""A small pixel-observation Gymnasium env, for tests of image policies (CNN encoders, uint8 storage).

Importing this module registers the Gymnasium id ``PatternImage-v0``, so the ``gymnasium`` env plugin makes it
from ``id: rlightning_core.testing.image_env:PatternImage-v0`` in any process (Ray env runners included)::

    env:
      type: gymnasium
      params: {id: "rlightning_core.testing.image_env:PatternImage-v0"}
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

__all__ = ["ENV_ID", "PatternImageEnv", "image_spaces"]

#: The id this module registers (make it with ``rlightning_core.testing.image_env:PatternImage-v0``).
ENV_ID = "PatternImage-v0"


def image_spaces(channels: int = 4, size: int = 36, n_actions: int = 2) -> tuple[spaces.Box, spaces.Discrete]:
    """Channels-first ``uint8`` image observations ``(channels, size, size)`` and ``Discrete(n_actions)``."""
    return spaces.Box(0, 255, (channels, size, size), np.uint8), spaces.Discrete(n_actions)


class PatternImageEnv(gymnasium.Env):
    """Each step shows a bright square in the left or right half of a dark image; pick that side.

    Observations are ``(channels, size, size)`` uint8 stacks like Atari's frame stacks: channel 0 is the current
    frame, channel ``k`` the frame ``k`` steps ago. The reward is 1 when the action (0 = left, 1 = right) names
    the side of the square in channel 0, else 0, so a random policy earns half of ``episode_steps`` and one
    that reads the image earns all of it. Episodes are truncated after ``episode_steps`` steps.

    Args:
        channels: stacked frames per observation.
        size: image height and width in pixels.
        episode_steps: steps per episode.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, channels: int = 4, size: int = 36, episode_steps: int = 16) -> None:
        self.observation_space, self.action_space = image_spaces(channels, size)
        self.channels, self.size, self.episode_steps = int(channels), int(size), int(episode_steps)
        self._frames = np.zeros((self.channels, self.size, self.size), dtype=np.uint8)
        self._side = 0
        self._t = 0

    def _frame(self, side: int) -> np.ndarray:
        frame = self.np_random.integers(0, 40, (self.size, self.size), dtype=np.uint8)  # dim noise
        half, q = self.size // 2, self.size // 4
        x0 = side * half + (half - q) // 2
        frame[q : q + q * 2, x0 : x0 + q] = 255
        return frame

    def _push(self) -> np.ndarray:
        self._side = int(self.np_random.integers(0, 2))
        self._frames = np.roll(self._frames, 1, axis=0)
        self._frames[0] = self._frame(self._side)
        return self._frames.copy()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """A new episode: an empty stack with one frame."""
        super().reset(seed=seed)
        self._frames[:] = 0
        self._t = 0
        return self._push(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Reward 1 for naming the square's side, then the next frame."""
        reward = 1.0 if int(action) == self._side else 0.0
        self._t += 1
        return self._push(), reward, False, self._t >= self.episode_steps, {}


if ENV_ID not in gymnasium.registry:
    gymnasium.register(ENV_ID, entry_point=PatternImageEnv)
