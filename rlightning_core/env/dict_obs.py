"""Dict observations leave an env worker flat: :class:`FlatDictWorker`, and the ``info`` action-mask wrapper.

:func:`flatten_dict_observations` wraps any env worker whose observation space is a ``gymnasium.spaces.Dict``,
so that it reports a :class:`~rlightning_core.spaces.FlatDict` and every observation (after ``reset``, after
``step``, and the final observation of an episode) is the flat ``[num_envs, n]`` batch. The builders apply it
to every worker they build (in the driver, in child processes' parents and in Ray env runners).

An env that gives its legal actions as ``info["action_mask"]`` instead of an observation key is wrapped by
:class:`ActionMaskFromInfo` (a Gymnasium wrapper, applied where the env is made), which moves the mask into a
Dict observation.
"""

from __future__ import annotations

from typing import Any

import attrs
import gymnasium
import numpy as np
from gymnasium import spaces

from rlightning_core.env.base import StepBatch
from rlightning_core.spaces import ACTION_MASK, FlatDict

__all__ = ["ActionMaskFromInfo", "FlatDictWorker", "flatten_dict_observations"]


class FlatDictWorker:
    """An env worker with ``Dict`` observations, seen as a worker of flat :class:`FlatDict` observations."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.num_envs = worker.num_envs
        self.observation_space = FlatDict(worker.observation_space)
        self.action_space = worker.action_space

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset the wrapped worker; flat observations."""
        return self.observation_space.flatten(self.worker.reset(seed=seed))

    def step(self, actions: np.ndarray) -> StepBatch:
        """Step the wrapped worker; ``obs`` and ``final_obs`` come back flat."""
        step = self.worker.step(actions)
        flat = self.observation_space.flatten
        final = None if step.final_obs is None else flat(step.final_obs)
        return attrs.evolve(step, obs=flat(step.obs), final_obs=final)

    def close(self) -> None:
        """Close the wrapped worker."""
        self.worker.close()

    def __getattr__(self, name: str) -> Any:
        if name == "worker":
            raise AttributeError(name)
        return getattr(self.worker, name)  # state_dict, render, kill ... are the wrapped worker's

    def __repr__(self) -> str:
        return f"FlatDictWorker({self.worker!r})"


def flatten_dict_observations(worker: Any) -> Any:
    """``worker`` wrapped by :class:`FlatDictWorker` when its observation space is a ``Dict``, else itself."""
    if isinstance(getattr(worker, "observation_space", None), spaces.Dict):
        return FlatDictWorker(worker)
    return worker


class ActionMaskFromInfo(gymnasium.Wrapper):
    """Moves ``info["action_mask"]`` into the observation: ``Dict({"obs": ..., "action_mask": ...})``.

    For a ``Discrete(n)`` env whose ``reset`` and ``step`` put a boolean / 0-1 array of ``n`` legal actions in
    ``info["action_mask"]``; an env that already returns a Dict observation gets the key added to it. Apply it
    where the env is made (e.g. in the function a Gymnasium id is registered with).

    Raises:
        TypeError: the action space is not ``Discrete`` (masking is for discrete actions only).
        KeyError: ``reset`` or ``step`` gave no ``info["action_mask"]``.
    """

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        if not isinstance(env.action_space, spaces.Discrete):
            raise TypeError(f"ActionMaskFromInfo: action masking needs a Discrete action space, got "
                            f"{env.action_space}")
        mask = spaces.Box(0, 1, (int(env.action_space.n),), np.int8)
        inner = env.observation_space
        keys = dict(inner.spaces) if isinstance(inner, spaces.Dict) else {"obs": inner}
        self.observation_space = spaces.Dict({**keys, ACTION_MASK: mask})

    def _obs(self, obs: Any, info: dict[str, Any]) -> dict[str, Any]:
        if ACTION_MASK not in info:
            raise KeyError(f"ActionMaskFromInfo: the env gave no info[{ACTION_MASK!r}]")
        base = dict(obs) if isinstance(obs, dict) else {"obs": obs}
        return {**base, ACTION_MASK: np.asarray(info[ACTION_MASK], dtype=np.int8)}

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:  # noqa: D102
        obs, info = self.env.reset(**kwargs)
        return self._obs(obs, info), info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:  # noqa: D102
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._obs(obs, info), reward, terminated, truncated, info
