"""The env contract: what an env plugin's factory returns, and what one step of it gives back.

An env component is registered with ``register(name, factory, config=Params)``; the factory is called as
``factory(params, *, num_envs, seed, worker_index, render_mode=None)`` and returns an :class:`EnvWorker`: a
vector of ``num_envs`` environments stepped together. Workers autoreset: when an episode ends, ``obs`` holds the
first observation of the next episode and ``final_obs`` the true last observation of the one that ended (needed
to bootstrap values on truncation).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import attrs
import numpy as np

__all__ = ["EnvWorker", "EpisodeStats", "StepBatch"]


@attrs.define(slots=True)
class EpisodeStats:
    """One finished episode."""

    env_index: int
    """Index of the env inside its worker."""
    episode_return: float
    length: int


@attrs.define(slots=True)
class StepBatch:
    """The result of stepping every env of a worker once. Arrays have a leading ``num_envs`` axis."""

    obs: np.ndarray
    """Observations to act on next (the reset observation where an episode just ended)."""
    reward: np.ndarray
    """float32 rewards."""
    terminated: np.ndarray
    """bool: the episode reached a terminal state (no bootstrapping)."""
    truncated: np.ndarray
    """bool: the episode was cut (time limit); bootstrap from ``final_obs``."""
    final_obs: np.ndarray | None = None
    """Real last observations; rows are meaningful where ``terminated | truncated``; ``None`` if none ended."""
    episodes: list[EpisodeStats] = attrs.Factory(list)
    """Episodes that finished on this step."""
    metrics: dict[str, list[float]] = attrs.Factory(dict)
    """Numeric values envs reported in ``info["metrics"]`` on this step, by name."""


@runtime_checkable
class EnvWorker(Protocol):
    """A vector of ``num_envs`` environments with single-env ``observation_space`` / ``action_space``."""

    num_envs: int
    observation_space: Any
    action_space: Any

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every env (env ``i`` seeded ``seed + i`` when ``seed`` is given); returns observations."""
        ...

    def step(self, actions: np.ndarray) -> StepBatch:
        """Step every env with one action each."""
        ...

    def close(self) -> None:
        """Release the envs."""
        ...
