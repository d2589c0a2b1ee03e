"""Core's preprocessors: running observation normalization, reward scaling, clipping.

All of them take and return numpy arrays (``[N, ...]`` batches from one vector env) and return float32; the
observation ones refuse ``uint8`` image spaces (they would store every pixel as float32).

Syncing statistics across rollout workers: every stateful preprocessor remembers the data it saw since its
last sync point (:meth:`~NormalizeObs.load_state_dict` or :meth:`~NormalizeObs.merge`) and reports it in
:meth:`state_dict` under ``new_*`` keys. ``merge(states)`` folds only those ``new_*`` parts into this
instance, so the usual round — ``master.merge([w.state_dict() for w in workers])`` then
``w.load_state_dict(master.state_dict())`` for every worker — gives exactly the statistics of one stream over
all the data, without counting the shared history once per worker. A state whose ``uid`` is this instance's
own is skipped (its data is already in).
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np

from rlightning_core.preprocess.base import Preprocessor
from rlightning_core.preprocess.params import (
    ClipObsParams,
    ClipRewardParams,
    NormalizeObsParams,
    ScaleRewardParams,
)
from rlightning_core.preprocess.running_stats import RunningMeanStd, batch_moments

__all__ = ["ClipObs", "ClipReward", "NormalizeObs", "ScaleReward"]


def _refuse_images(name: str, observation_space: Any) -> None:
    """Raise :class:`UserError` for ``uint8`` image observations, which this float32 preprocessor would cast."""
    from rlightning_core.errors import UserError
    from rlightning_core.spaces import FlatDict

    if isinstance(observation_space, FlatDict) and (observation_space.has_action_mask
                                                    or observation_space.image_keys()):
        raise UserError(f"preprocessors: {name!r}: the observations are Dict observations with an action_mask or "
                        f"image keys ({observation_space.dict_space}); it would change the mask or the pixels. "
                        "Normalize the vector keys in the env instead (docs/dict-observations.md)")
    shape = getattr(observation_space, "shape", None)
    if shape is None or len(shape) != 3 or getattr(observation_space, "dtype", None) != np.uint8:
        return

    raise UserError(f"preprocessors: {name!r}: the observations are uint8 images of shape "
                    f"{tuple(shape)}; it would turn them into float32 per pixel (4x the memory in every buffer). "
                    "Remove it from the preprocessors list: image policies (encoder cnn) scale pixels by 1/255 "
                    "on their device")


class _SyncedStats:
    """A :class:`RunningMeanStd` over all data plus one over the data since the last sync point."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.total = RunningMeanStd(shape)
        self.new = RunningMeanStd(shape)
        self.uid = uuid.uuid4().hex

    def update(self, batch: np.ndarray) -> None:
        shape = self.total.shape
        if np.ndim(batch) == len(shape) + 1 and len(batch) == 1:  # one env's step
            sample = np.asarray(batch[0], dtype=np.float64)
            self.total.merge_one(sample)
            self.new.merge_one(sample)
            return
        moments = batch_moments(batch, shape)  # once for both summaries
        if moments is not None:
            self.total.merge(*moments)
            self.new.merge(*moments)

    def state_dict(self) -> dict[str, Any]:
        return {**self.total.state_dict(), **self.new.state_dict("new_"), "uid": self.uid}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total.load_state_dict(state)
        self.new.reset()

    def merge(self, states: list[dict[str, Any]]) -> None:
        for state in states:
            if state.get("uid") == self.uid:
                continue
            if "new_count" in state:
                self.total.merge(state["new_mean"], state["new_var"], state["new_count"])
            else:  # a plain ``mean/var/count`` summary (e.g. from another tool): all of it is new data
                self.total.merge(state["mean"], state["var"], state["count"])
        self.new.reset()


class NormalizeObs(Preprocessor):
    """``clip((obs - mean) / sqrt(var + epsilon), -clip, clip)`` with running per-feature mean and variance.

    Statistics are updated from every batch seen with ``update=True`` (training rollouts), before normalizing
    it, like SB3's ``VecNormalize``; ``update=False`` (evaluation) only applies them.

    Args:
        params: :class:`~rlightning_core.preprocess.params.NormalizeObsParams`.
        observation_space: single-env observation space; its ``shape`` sizes the statistics (else the first
            batch does).
        num_envs: envs per batch (unused: statistics are shared by all envs).
    """

    def __init__(
        self, params: NormalizeObsParams | None = None, *, observation_space: Any = None, num_envs: int = 1
    ) -> None:
        params = params or NormalizeObsParams()
        _refuse_images("normalize_obs", observation_space)
        super().__init__(params, observation_space=observation_space, num_envs=num_envs)
        shape = getattr(observation_space, "shape", None)
        self._stats: _SyncedStats | None = _SyncedStats(tuple(shape)) if shape is not None else None

    @property
    def rms(self) -> RunningMeanStd:
        """The statistics over all data (raises before the first batch when no space was given)."""
        if self._stats is None:
            raise RuntimeError("NormalizeObs has no statistics yet: no observation_space and no batch seen")
        return self._stats.total

    def _ensure(self, sample_shape: tuple[int, ...]) -> _SyncedStats:
        if self._stats is None:
            self._stats = _SyncedStats(sample_shape)
        return self._stats

    def obs(self, obs: np.ndarray, *, update: bool = True) -> np.ndarray:
        """Normalize a batch ``[N, *shape]`` (updating the statistics first when ``update``)."""
        obs = np.asarray(obs)
        stats = self._ensure(tuple(obs.shape[1:]))
        if update:
            stats.update(obs)
        total = stats.total
        out = (obs - total.mean) / total.std(self.params.epsilon)
        clip = self.params.clip  # minimum(maximum()): np.clip's dispatch costs more at one env's size
        return np.minimum(np.maximum(out, -clip), clip).astype(np.float32)

    def export_module(self) -> Any:
        """:meth:`obs` with ``update=False`` as a torch module (the current statistics, frozen)."""
        from rlightning_core.preprocess.torch_modules import NormalizeObsModule

        total = self.rms
        return NormalizeObsModule(total.mean, total.std(self.params.epsilon), self.params.clip)

    def state_dict(self) -> dict[str, Any]:
        """``mean``, ``var`` (float64 arrays), ``count``; ``new_*`` since the last sync; ``uid``."""
        return {} if self._stats is None else self._stats.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take over ``mean/var/count`` (a sync point: the ``new_*`` part starts empty)."""
        if not state:
            return
        self._ensure(tuple(np.shape(state["mean"]))).load_state_dict(state)

    def merge(self, states: list[dict[str, Any]]) -> None:
        """Fold the ``new_*`` statistics of other workers' states into this one (see the module docstring)."""
        states = [s for s in states if s]
        if states:
            self._ensure(tuple(np.shape(states[0]["mean"]))).merge(states)


class ScaleReward(Preprocessor):
    """Divide rewards by the running std of the discounted return, per env (SB3 ``VecNormalize`` style).

    Each env keeps ``G <- gamma * G + r``; the std of all ``G`` seen scales rewards:
    ``clip(r / sqrt(var(G) + epsilon), -clip, clip)``. ``G`` restarts at 0 where ``done``. Rewards are not
    centred (shifting them would change the optimal policy in episodic tasks).

    Args:
        params: :class:`~rlightning_core.preprocess.params.ScaleRewardParams`.
        observation_space: unused.
        num_envs: envs per batch (length of the per-env return vector).
    """

    def __init__(
        self, params: ScaleRewardParams | None = None, *, observation_space: Any = None, num_envs: int = 1
    ) -> None:
        params = params or ScaleRewardParams()
        super().__init__(params, observation_space=observation_space, num_envs=num_envs)
        self._stats = _SyncedStats(())
        self.returns = np.zeros(num_envs, dtype=np.float64)

    @property
    def rms(self) -> RunningMeanStd:
        """Statistics of the discounted returns over all data."""
        return self._stats.total

    def reward(self, reward: np.ndarray, done: np.ndarray, *, update: bool = True) -> np.ndarray:
        """Scale a batch of rewards ``[N]``; with ``update``, advance the returns and their statistics."""
        reward = np.asarray(reward, dtype=np.float64)
        if reward.shape != self.returns.shape:
            raise ValueError(
                f"ScaleReward was built for num_envs={self.returns.shape[0]} but got rewards of shape "
                f"{reward.shape}; pass the vector env's num_envs to the preprocessor"
            )
        if update:
            self.returns = self.returns * self.params.gamma + reward
            self._stats.update(self.returns)
        out = reward / self._stats.total.std(self.params.epsilon)
        if update:
            self.returns[np.asarray(done, dtype=bool)] = 0.0
        clip = self.params.clip
        return np.minimum(np.maximum(out, -clip), clip).astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        """Return statistics (``mean/var/count``, ``new_*``, ``uid``) and this worker's ``returns``."""
        return {**self._stats.state_dict(), "returns": self.returns.copy()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take over the statistics (a sync point); ``returns`` too when present with this ``num_envs``.

        To sync statistics into a worker without touching its in-flight returns, drop ``returns`` from
        ``state`` first.
        """
        if not state:
            return
        self._stats.load_state_dict(state)
        returns = state.get("returns")
        if returns is not None and np.shape(returns) == self.returns.shape:
            self.returns = np.asarray(returns, dtype=np.float64).copy()

    def merge(self, states: list[dict[str, Any]]) -> None:
        """Fold other workers' ``new_*`` return statistics into this one (per-env returns stay local)."""
        self._stats.merge([s for s in states if s])


class ClipObs(Preprocessor):
    """Clip observations to ``[low, high]`` (stateless)."""

    def __init__(
        self, params: ClipObsParams | None = None, *, observation_space: Any = None, num_envs: int = 1
    ) -> None:
        _refuse_images("clip_obs", observation_space)
        super().__init__(params or ClipObsParams(), observation_space=observation_space, num_envs=num_envs)

    def obs(self, obs: np.ndarray, *, update: bool = True) -> np.ndarray:
        """``clip(obs, low, high)`` as float32."""
        return np.clip(np.asarray(obs, dtype=np.float32), self.params.low, self.params.high)

    def export_module(self) -> Any:
        """:meth:`obs` as a torch module."""
        from rlightning_core.preprocess.torch_modules import ClipObsModule

        return ClipObsModule(self.params.low, self.params.high)


class ClipReward(Preprocessor):
    """Clip rewards to ``[low, high]`` (stateless; DQN's Atari reward clipping with the defaults)."""

    def __init__(
        self, params: ClipRewardParams | None = None, *, observation_space: Any = None, num_envs: int = 1
    ) -> None:
        super().__init__(params or ClipRewardParams(), observation_space=observation_space, num_envs=num_envs)

    def reward(self, reward: np.ndarray, done: np.ndarray, *, update: bool = True) -> np.ndarray:
        """``clip(reward, low, high)`` as float32."""
        return np.clip(np.asarray(reward, dtype=np.float32), self.params.low, self.params.high)
