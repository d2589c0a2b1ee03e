"""Small Gymnasium envs with MultiDiscrete, MultiBinary, bounded Box and Tuple actions, for tests of policies.

Importing this module registers these Gymnasium ids; the ``gymnasium`` env plugin makes them from
``id: rlightning_core.testing.space_envs:<ID>`` in any process (Ray env runners included)::

    env:
      type: gymnasium
      params: {id: "rlightning_core.testing.space_envs:MultiDiscreteMatch-v0"}

Each episode lasts ``episode_steps`` steps (truncated, never terminated); each step shows a random target in the
observation and rewards the action for matching it, so a policy that reads the observation earns
``episode_steps`` per episode and a random one clearly less. Every env is *strict*: an action outside its
action space (a bit that is not 0/1, an index outside ``start .. start + nvec - 1``, a value outside the box)
raises ``ValueError``, so a policy that sends such actions fails loudly instead of being silently clipped.

:func:`standard_action_spaces` names one action space of each kind; the conformance kit
(:func:`rlightning_core.testing.check_policy_spaces`) checks a policy on those it declares it supports.
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

__all__ = ["BOX_ID", "MULTI_BINARY_ID", "MULTI_DISCRETE_ID", "TUPLE_ID", "BoxTargetEnv", "MultiBinaryMatchEnv",
           "MultiDiscreteMatchEnv", "TupleActionEnv", "continuous_control_cases", "standard_action_spaces"]

MULTI_DISCRETE_ID = "MultiDiscreteMatch-v0"
MULTI_BINARY_ID = "MultiBinaryMatch-v0"
BOX_ID = "BoxTarget-v0"
TUPLE_ID = "TupleAction-v0"


def standard_action_spaces() -> dict[str, Any]:
    """One single-env action space per kind, by the names plugins declare support with.

    ``discrete``: ``Discrete(3, start=1)``; ``multi_discrete``: ``MultiDiscrete([3, 4], start=[0, 1])`` (uneven
    ``nvec`` and a ``start``); ``multi_binary``: ``MultiBinary(3)``; ``box``: a 2-D Box with uneven finite bounds;
    ``tuple``: ``Tuple(Discrete(2), Box(-1, 1, (1,)))``, which no builtin policy supports.
    """
    return {
        "discrete": spaces.Discrete(3, start=1),
        "multi_discrete": spaces.MultiDiscrete([3, 4], start=[0, 1]),
        "multi_binary": spaces.MultiBinary(3),
        "box": spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([1.0, 0.5], np.float32), dtype=np.float32),
        "tuple": spaces.Tuple((spaces.Discrete(2), spaces.Box(-1.0, 1.0, (1,), np.float32))),
    }


def continuous_control_cases() -> dict[str, tuple[Any, Any]]:
    """(observation space, action space) pairs a continuous-control policy (SAC, TD3, ...) must handle, by id.

    ``pendulum-like``: a 3-vector and one action in ``[-2, 2]``; ``asymmetric-bounds``: two actions whose box is
    not centred on 0 (``[-1, 1]`` and ``[0, 5]``), which a policy that scales ``tanh`` to the box must respect;
    ``2d-observations``: a ``(2, 3)`` observation, which a flat MLP must flatten. For
    ``pytest.mark.parametrize("obs_space, act_space", list(cases.values()), ids=list(cases))``.
    """
    return {
        "pendulum-like": (spaces.Box(-1.0, 1.0, (3,), np.float32), spaces.Box(-2.0, 2.0, (1,), np.float32)),
        "asymmetric-bounds": (spaces.Box(-1.0, 1.0, (4,), np.float32),
                              spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([1.0, 5.0], np.float32),
                                         dtype=np.float32)),
        "2d-observations": (spaces.Box(0.0, 1.0, (2, 3), np.float32), spaces.Box(-1.0, 1.0, (2,), np.float32)),
    }


class _TargetEnv(gymnasium.Env):
    """Shared episode logic: a new target every step, reward for matching it, truncation at ``episode_steps``."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, episode_steps: int) -> None:
        self.episode_steps = int(episode_steps)
        self._t = 0

    def _new_target(self) -> np.ndarray:
        raise NotImplementedError

    def _reward(self, action: np.ndarray) -> float:
        raise NotImplementedError

    def _check(self, action: Any) -> np.ndarray:
        """The action as an array; ``ValueError`` when it is outside the action space."""
        a = np.asarray(action)
        space = self.action_space
        ok = a.shape == space.shape
        if ok and isinstance(space, spaces.MultiDiscrete):
            ok = a.dtype.kind in "iu" and bool(np.all(a >= space.start) and np.all(a < space.start + space.nvec))
        elif ok and isinstance(space, spaces.MultiBinary):
            ok = a.dtype.kind in "iub" and bool(np.all((a == 0) | (a == 1)))
        elif ok and isinstance(space, spaces.Box):
            ok = bool(np.all(np.isfinite(a)) and np.all(a >= space.low) and np.all(a <= space.high))
        if not ok:
            raise ValueError(f"{type(self).__name__}: action {action!r} is outside the action space {space}")
        return a

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """A new episode and its first target."""
        super().reset(seed=seed)
        self._t = 0
        return self._new_target(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Reward for the action against the current target, then the next target."""
        reward = self._reward(self._check(action))
        self._t += 1
        return self._new_target(), reward, False, self._t >= self.episode_steps, {}


class MultiDiscreteMatchEnv(_TargetEnv):
    """Name a target per dimension: ``MultiDiscrete(nvec, start)`` actions, one-hot targets as observations.

    The observation is the concatenated one-hot codes of a random index per dimension (``sum(nvec)`` floats);
    the reward is the fraction of dimensions where the action equals ``start + index``. A random policy earns
    ``mean(1 / nvec)`` per step, one that reads the observation 1.
    """

    def __init__(self, nvec: tuple[int, ...] = (3, 4), start: tuple[int, ...] = (0, 1),
                 episode_steps: int = 8) -> None:
        super().__init__(episode_steps)
        self.action_space = spaces.MultiDiscrete(list(nvec), start=list(start))
        self.nvec, self.start = np.asarray(nvec, np.int64), np.asarray(start, np.int64)
        self.observation_space = spaces.Box(0.0, 1.0, (int(self.nvec.sum()),), np.float32)
        self._target = np.zeros(len(self.nvec), np.int64)

    def _new_target(self) -> np.ndarray:
        self._target = self.np_random.integers(0, self.nvec)
        obs = np.zeros(self.observation_space.shape, np.float32)
        obs[np.concatenate(([0], np.cumsum(self.nvec)[:-1])) + self._target] = 1.0
        return obs

    def _reward(self, action: np.ndarray) -> float:
        return float(np.mean(action == self.start + self._target))


class MultiBinaryMatchEnv(_TargetEnv):
    """Copy the bits: ``MultiBinary(n)`` actions, the target bits as the (float) observation.

    The reward is the fraction of bits equal to the target's; a random policy earns 1/2 per step.
    """

    def __init__(self, n: int = 3, episode_steps: int = 8) -> None:
        super().__init__(episode_steps)
        self.action_space = spaces.MultiBinary(int(n))
        self.observation_space = spaces.Box(0.0, 1.0, (int(n),), np.float32)
        self._target = np.zeros(int(n), np.int64)

    def _new_target(self) -> np.ndarray:
        self._target = self.np_random.integers(0, 2, self.action_space.shape)
        return self._target.astype(np.float32)

    def _reward(self, action: np.ndarray) -> float:
        return float(np.mean(action == self._target))


class BoxTargetEnv(_TargetEnv):
    """Reach a target point inside a bounded box: 1-D Box actions with uneven, finite bounds.

    The observation is the target, drawn uniformly from the action box (the space of
    :func:`standard_action_spaces` ``["box"]``); the reward is ``1 - mean(|action - target| / (high - low))``.
    """

    def __init__(self, episode_steps: int = 8) -> None:
        super().__init__(episode_steps)
        self.action_space = standard_action_spaces()["box"]
        self.observation_space = spaces.Box(self.action_space.low, self.action_space.high, dtype=np.float32)
        self._target = np.zeros(self.action_space.shape, np.float32)

    def _new_target(self) -> np.ndarray:
        box = self.action_space
        self._target = self.np_random.uniform(box.low, box.high).astype(np.float32)
        return self._target.copy()

    def _reward(self, action: np.ndarray) -> float:
        box = self.action_space
        return float(1.0 - np.mean(np.abs(action - self._target) / (box.high - box.low)))


class TupleActionEnv(_TargetEnv):
    """``Tuple(Discrete(2), Box(-1, 1, (1,)))`` actions, which no builtin policy supports (config-error tests)."""

    def __init__(self, episode_steps: int = 8) -> None:
        super().__init__(episode_steps)
        self.action_space = standard_action_spaces()["tuple"]
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def _new_target(self) -> np.ndarray:
        return self.np_random.uniform(-1.0, 1.0, (2,)).astype(np.float32)

    def _check(self, action: Any) -> np.ndarray:
        if not self.action_space.contains(action):
            raise ValueError(f"TupleActionEnv: action {action!r} is outside the action space {self.action_space}")
        return np.asarray(action[1])

    def _reward(self, action: np.ndarray) -> float:
        return 0.0


for _id, _entry in ((MULTI_DISCRETE_ID, MultiDiscreteMatchEnv), (MULTI_BINARY_ID, MultiBinaryMatchEnv),
                    (BOX_ID, BoxTargetEnv), (TUPLE_ID, TupleActionEnv)):
    if _id not in gymnasium.registry:
        gymnasium.register(_id, entry_point=_entry)
