"""Small Dict-observation Gymnasium envs, for tests of Dict encoders and action masking.

Importing this module registers two Gymnasium ids, so the ``gymnasium`` env plugin makes them in any process
(Ray env runners included) from ``id: rlightning_core.testing.dict_envs:<id>``:

- ``MaskedChoice-v0`` (:class:`MaskedChoiceEnv`): legal actions change every step, given as the
  ``action_mask`` key; an illegal action ends the episode with a penalty and is counted in
  ``info["metrics"]["illegal_action"]``.
- ``DictCue-v0`` (:class:`DictCueEnv`): a vector key and a small image key, both needed to act well.
- ``InfoMaskedChoice-v0``: ``MaskedChoice`` giving its mask in ``info`` instead, wrapped by
  :class:`~rlightning_core.env.dict_obs.ActionMaskFromInfo`.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from rlightning_core.env.dict_obs import ActionMaskFromInfo
from rlightning_core.spaces import ACTION_MASK

__all__ = ["DICT_CUE_ID", "MASKED_CHOICE_ID", "DictCueEnv", "MaskedChoiceEnv"]

MASKED_CHOICE_ID = "MaskedChoice-v0"
INFO_MASKED_CHOICE_ID = "InfoMaskedChoice-v0"
DICT_CUE_ID = "DictCue-v0"


class MaskedChoiceEnv(gymnasium.Env):
    """Pick the cued action among the legal ones.

    Each step a target action is drawn and cued (``cue``: its one-hot); a random subset of the other actions
    is legal with it (``action_mask``). Reward: 1 for the target, 0 for another legal action; an illegal action
    gives ``-1`` and terminates the episode. Episodes are truncated after ``episode_steps`` steps, so a policy
    that always takes the target earns ``episode_steps``. Every step reports ``info["metrics"]["illegal_action"]``
    (1 when the action taken was illegal).

    Args:
        n_actions: size of the ``Discrete`` action space.
        episode_steps: steps per episode.
        mask_in_info: give the mask as ``info["action_mask"]`` (observation: the cue alone) instead of a key.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, n_actions: int = 5, episode_steps: int = 10, mask_in_info: bool = False) -> None:
        self.n, self.episode_steps, self.mask_in_info = int(n_actions), int(episode_steps), bool(mask_in_info)
        cue = spaces.Box(0.0, 1.0, (self.n,), np.float32)
        mask = spaces.Box(0, 1, (self.n,), np.int8)
        self.observation_space = cue if mask_in_info else spaces.Dict({"cue": cue, ACTION_MASK: mask})
        self.action_space = spaces.Discrete(self.n)
        self._target, self._mask, self._t = 0, np.ones(self.n, np.int8), 0

    def _draw(self) -> tuple[Any, dict[str, Any]]:
        self._target = int(self.np_random.integers(self.n))
        self._mask = (self.np_random.random(self.n) < 0.5).astype(np.int8)
        self._mask[self._target] = 1
        cue = np.zeros(self.n, np.float32)
        cue[self._target] = 1.0
        if self.mask_in_info:
            return cue, {ACTION_MASK: self._mask.copy()}
        return {"cue": cue, ACTION_MASK: self._mask.copy()}, {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """A new episode."""
        super().reset(seed=seed)
        self._t = 0
        return self._draw()

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Reward the target, end the episode on an illegal action."""
        a = int(action)
        self._t += 1
        illegal = not self._mask[a]
        reward = -1.0 if illegal else (1.0 if a == self._target else 0.0)
        obs, info = self._draw()
        info["metrics"] = {"illegal_action": float(illegal)}
        return obs, reward, illegal, self._t >= self.episode_steps, info


class DictCueEnv(gymnasium.Env):
    """Four actions; the right one is ``2 * (cue > 0) + (image is bright)``: both keys are needed.

    Observations: ``vec`` (2 floats: the cue's sign and noise) and ``image`` (``(1, size, size)`` uint8, bright
    or dark with noise). Reward 1 for the right action, else 0; episodes of ``episode_steps`` steps, so random
    play earns a quarter of them.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, size: int = 6, episode_steps: int = 8) -> None:
        self.size, self.episode_steps = int(size), int(episode_steps)
        self.observation_space = spaces.Dict({
            "vec": spaces.Box(-2.0, 2.0, (2,), np.float32),
            "image": spaces.Box(0, 255, (1, self.size, self.size), np.uint8),
        })
        self.action_space = spaces.Discrete(4)
        self._answer, self._t = 0, 0

    def _draw(self) -> dict[str, np.ndarray]:
        sign, bright = int(self.np_random.integers(2)), int(self.np_random.integers(2))
        self._answer = 2 * sign + bright
        vec = np.array([1.0 if sign else -1.0, self.np_random.uniform(-1, 1)], np.float32)
        base = 200 if bright else 30
        image = (base + self.np_random.integers(-25, 25, (1, self.size, self.size))).astype(np.uint8)
        return {"vec": vec, "image": image}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """A new episode."""
        super().reset(seed=seed)
        self._t = 0
        return self._draw(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """Reward 1 for the right action."""
        reward = 1.0 if int(action) == self._answer else 0.0
        self._t += 1
        return self._draw(), reward, False, self._t >= self.episode_steps, {}


def _info_masked(**kwargs: Any) -> gymnasium.Env:
    return ActionMaskFromInfo(MaskedChoiceEnv(mask_in_info=True, **kwargs))


for _id, _entry in ((MASKED_CHOICE_ID, MaskedChoiceEnv), (DICT_CUE_ID, DictCueEnv),
                    (INFO_MASKED_CHOICE_ID, _info_masked)):
    if _id not in gymnasium.registry:
        gymnasium.register(_id, entry_point=_entry)
