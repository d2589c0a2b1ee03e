"""``GymnasiumWorker``: a Gymnasium vector env of ``num_envs`` behind rlightning's ``EnvWorker`` contract.

The vector env autoresets in Gymnasium's ``SAME_STEP`` mode, so every step returns a valid transition for
every env: where an episode ended, ``obs`` already holds the first observation of the next episode and
``StepBatch.final_obs`` the real last observation of the one that ended (needed to bootstrap on truncation).

The per-step work outside Gymnasium is a handful of vectorised numpy operations; Python loops run only over
the envs whose episode ended on that step, and over ``info["metrics"]`` when an env reports metrics.
"""

from __future__ import annotations

import copy
from functools import partial
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.utils import concatenate, create_empty_array, iterate

from rlightning_core.env.base import EpisodeStats, StepBatch
from rlightning_gymnasium.deps import ensure_ale_registered, looks_like_atari, translate_make_error
from rlightning_gymnasium.params import GymnasiumParams, resolve_wrapper
from rlightning_gymnasium.state import env_state, load_env_state

__all__ = ["GymnasiumWorker", "make_single_env"]


def make_single_env(params: GymnasiumParams, render_mode: str | None = None) -> gymnasium.Env:
    """One env exactly as each slot of a worker's vector env is built: ``gymnasium.make`` plus the wrappers.

    Args:
        params: the structured ``env[i].params``.
        render_mode: Gymnasium render mode (``rgb_array`` for videos), or ``None``.
    """
    atari = params.preset == "atari"
    kwargs: dict[str, Any] = dict(params.kwargs)
    if params.max_episode_steps is not None and not atari:  # the preset counts agent steps, not frames
        kwargs["max_episode_steps"] = params.max_episode_steps
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if atari:
        kwargs["frameskip"] = 1
    if atari or looks_like_atari(params.id):
        ensure_ale_registered()  # in every process that makes envs: async subprocesses, Ray actors
    try:
        env = gymnasium.make(params.id, **kwargs)
    except (ImportError, gymnasium.error.DependencyNotInstalled) as exc:  # what the env imports is missing
        user_error = translate_make_error(exc, params.id)
        if user_error is None:
            raise
        raise user_error from None
    if atari:
        from rlightning_gymnasium.atari import wrap_atari

        env = wrap_atari(env, training=params.training, max_episode_steps=params.max_episode_steps)
    for spec in params.wrappers:
        env = resolve_wrapper(spec.type)(env, **spec.kwargs)
    return env


class GymnasiumWorker:
    """A vector of ``num_envs`` Gymnasium envs stepped together (an :class:`~rlightning_core.env.EnvWorker`).

    Args:
        params: the env's structured params.
        num_envs: envs in the vector.
        seed: this worker's seed (derived by the builder); the first :meth:`reset` without a seed uses it, so
            a run is reproducible from its one seed. It also seeds the exposed action/observation spaces.
        worker_index: index of this worker within its env config (for names and logs).
        render_mode: Gymnasium render mode passed to every env.
    """

    def __init__(
        self,
        params: GymnasiumParams,
        *,
        num_envs: int,
        seed: int,
        worker_index: int = 0,
        render_mode: str | None = None,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.params = params
        self.num_envs = num_envs
        self.seed = seed
        self.worker_index = worker_index
        self.render_mode = render_mode
        fns = [partial(make_single_env, params, render_mode) for _ in range(num_envs)]
        # copy=False: the worker copies observations itself (ndarray.copy is ~8x cheaper than deepcopy).
        env: VectorEnv
        if params.vectorization == "async":
            env = AsyncVectorEnv(fns, copy=False, context=params.context,
                                 autoreset_mode=AutoresetMode.SAME_STEP)
        else:
            env = SyncVectorEnv(fns, copy=False, autoreset_mode=AutoresetMode.SAME_STEP)
        self._env = env
        self.observation_space = env.single_observation_space
        self.action_space = env.single_action_space
        self.observation_space.seed(seed)
        self.action_space.seed(seed)
        # Episode statistics: running returns, and lengths as (steps so far - step the episode started at),
        # so the per-step cost is one in-place add; the rest happens only for envs whose episode ended.
        self._returns = np.zeros(num_envs, dtype=np.float64)
        self._started = np.zeros(num_envs, dtype=np.int64)
        self._t = 0
        # The atari preset ends episodes on lost lives in training; its envs report whole games themselves.
        self._game_episodes = params.preset == "atari"
        self._has_reset = False
        self._closed = False

    # -- the EnvWorker contract ------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every env; env ``i`` is seeded ``seed + i`` (the worker's own seed on the first reset).

        Running episode returns and lengths restart from zero.
        """
        if seed is None and not self._has_reset:
            seed = self.seed
        obs, _info = self._env.reset(seed=seed)
        self._has_reset = True
        self._returns[:] = 0.0
        self._started[:] = 0
        self._t = 0
        return _copy_obs(obs)

    def step(self, actions: np.ndarray) -> StepBatch:
        """Step every env once; finished episodes autoreset in the same step (see the module docstring)."""
        if not self._has_reset:
            raise RuntimeError(f"{self!r}: call reset() before step()")
        obs, reward, terminated, truncated, info = self._env.step(actions)
        obs = _copy_obs(obs)
        self._returns += reward
        self._t += 1
        done = terminated | truncated
        final_obs = None
        episodes: list[EpisodeStats] = []
        if np.count_nonzero(done):  # ~5x cheaper than done.any() on small arrays
            ended = np.flatnonzero(done)
            rows = ended.tolist()
            final_obs = self._final_obs(obs, info["final_obs"], rows)
            if self._game_episodes:
                episodes = _game_episodes(info["final_info"], rows)
            else:
                lengths = (self._t - self._started[ended]).tolist()
                episodes = [
                    EpisodeStats(env_index=i, episode_return=r, length=n)
                    for i, r, n in zip(rows, self._returns[ended].tolist(), lengths, strict=True)
                ]
            self._returns[ended] = 0.0
            self._started[ended] = self._t
        metrics = _collect_metrics(info, done) if info else {}  # info is {} on most steps of most envs
        return StepBatch(
            obs=obs,
            reward=reward.astype(np.float32),
            terminated=terminated,
            truncated=truncated,
            final_obs=final_obs,
            episodes=episodes,
            metrics=metrics,
        )

    def close(self) -> None:
        """Close the envs (and the subprocesses of an ``async`` worker). Safe to call twice."""
        if not self._closed:
            self._closed = True
            self._env.close()

    # -- state (checkpoints) ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any] | None:
        """The envs' own state and the running episode stats, as arrays and plain values (no pickle).

        ``None`` when it cannot be captured exactly: ``async`` workers (envs live in subprocesses), a worker
        never reset, or an env whose state is not plain data (see :mod:`rlightning_gymnasium.state`). A
        resumed run then resets the worker instead.
        """
        if not isinstance(self._env, SyncVectorEnv) or not self._has_reset:
            return None
        envs = [env_state(e) for e in self._env.envs]
        if any(s is None for s in envs):
            return None
        return {"envs": envs, "returns": self._returns.copy(), "started": self._started.copy(), "t": self._t}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` into a worker built from the same params and ``num_envs``."""
        if not isinstance(self._env, SyncVectorEnv):
            raise RuntimeError(f"{self!r}: async workers cannot restore env state")
        if len(state["envs"]) != self.num_envs:
            raise ValueError(f"the saved state holds {len(state['envs'])} envs, this worker {self.num_envs}")
        for env, saved in zip(self._env.envs, state["envs"], strict=True):
            load_env_state(env, saved)
        self._returns[:] = state["returns"]
        self._started[:] = state["started"]
        self._t = int(state["t"])
        self._has_reset = True

    # -- extras ----------------------------------------------------------------------------------------------

    def render(self) -> tuple[Any, ...] | None:
        """Frames of every env (with ``render_mode="rgb_array"``)."""
        return self._env.render()

    @property
    def vector_env(self) -> VectorEnv:
        """The underlying Gymnasium vector env (for debugging; stepping it directly bypasses the stats)."""
        return self._env

    def __enter__(self) -> GymnasiumWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"GymnasiumWorker(id={self.params.id!r}, num_envs={self.num_envs}, "
                f"vectorization={self.params.vectorization!r}, worker_index={self.worker_index})")

    def _final_obs(self, obs: Any, last: np.ndarray, rows: list[int]) -> Any:
        """``obs`` with the rows of ended envs replaced by their real last observation (``last[i]``)."""
        if isinstance(obs, np.ndarray):
            final = obs.copy()
            for i in rows:
                final[i] = last[i]
            return final
        items = list(iterate(self._env.observation_space, obs))
        for i in rows:
            items[i] = last[i]
        space = self.observation_space
        out: Any = create_empty_array(space, n=self.num_envs)
        return concatenate(space, items, out)


def _game_episodes(final_info: dict[str, Any], rows: list[int]) -> list[EpisodeStats]:
    """The games that ended among ``rows``, as the envs' ``RecordEpisodeStatistics`` counted them.

    An env whose episode ended on a lost life (the atari preset in training) has no ``episode`` entry: its
    game goes on, so it contributes no episode.
    """
    stats = final_info.get("episode")
    if stats is None:
        return []
    mask = final_info["_episode"]
    return [EpisodeStats(env_index=i, episode_return=float(stats["r"][i]), length=int(stats["l"][i]))
            for i in rows if mask[i]]


def _copy_obs(obs: Any) -> Any:
    return obs.copy() if isinstance(obs, np.ndarray) else copy.deepcopy(obs)


def _collect_metrics(info: dict[str, Any], done: np.ndarray) -> dict[str, list[float]]:
    """Numeric ``info["metrics"]`` values of this step by name, in env order.

    In ``SAME_STEP`` mode the step info of an env whose episode ended sits under ``info["final_info"]`` and
    ``info`` itself holds its reset info; so live envs are read from ``info`` and ended ones from
    ``final_info``. Nested dicts become ``outer/inner`` names.
    """
    if "metrics" not in info and "metrics" not in info.get("final_info", ()):
        return {}
    pairs: dict[str, list[tuple[int, float]]] = {}
    for source, rows in ((info, ~done), (info.get("final_info"), done)):
        if not isinstance(source, dict) or "metrics" not in source:
            continue
        metrics = source["metrics"]
        if not isinstance(metrics, dict):
            raise TypeError(f'info["metrics"] must be a dict of name -> number, got {metrics!r}')
        _gather(metrics, rows, "", pairs)
    return {name: [v for _, v in sorted(items, key=lambda p: p[0])] for name, items in pairs.items()}


def _gather(metrics: dict[str, Any], rows: np.ndarray, prefix: str,
            out: dict[str, list[tuple[int, float]]]) -> None:
    for key, values in metrics.items():
        if key.startswith("_"):
            continue
        name = f"{prefix}{key}"
        if isinstance(values, dict):
            _gather(values, rows, f"{name}/", out)
            continue
        mask = metrics.get(f"_{key}")
        selected = rows if mask is None else rows & mask
        if not selected.any():
            continue
        values = np.asarray(values)
        if values.ndim != 1:
            raise TypeError(f'info["metrics"][{name!r}] must be one number per env, '
                            f'got values of shape {values.shape[1:]}')
        items = out.setdefault(name, [])
        for i in np.flatnonzero(selected).tolist():
            value = values[i]
            try:
                items.append((i, float(value)))
            except (TypeError, ValueError):
                raise TypeError(
                    f'info["metrics"][{name!r}] must be a number, got {value!r} (env {i})'
                ) from None
