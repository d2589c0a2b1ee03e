"""``vectorization: envpool``: Atari (with ``preset: atari``) and MuJoCo ids stepped by envpool's C++ pool.

Envpool autoresets on the step after an episode ends; this worker resets ended envs at once instead, so its
transitions and episode boundaries match the Gymnasium path (same-step autoreset, ``final_obs``). Env ``i`` of
the pool is seeded ``seed + i`` by envpool itself (one ``seed`` per pool).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from rlightning_core.env.base import EpisodeStats, StepBatch
from rlightning_gymnasium.params import GymnasiumParams

__all__ = ["EnvpoolWorker", "envpool_task"]

_ATARI = re.compile(r"^(?:ALE/)?([A-Za-z]+?)(NoFrameskip-v4|-v5)$")
_MUJOCO = re.compile(r"^(Ant|HalfCheetah|Hopper|Humanoid|HumanoidStandup|InvertedDoublePendulum|"
                     r"InvertedPendulum|Pusher|Reacher|Swimmer|Walker2d)-v(4|5)$")


def envpool_task(params: GymnasiumParams) -> tuple[str, dict[str, Any]] | None:
    """Envpool's task id and make() options for ``params``, or ``None`` when envpool has no such env."""
    m = _ATARI.match(params.id)
    if m and params.preset == "atari":
        sticky = 0.25 if m.group(2) == "-v5" else 0.0
        opts = {"episodic_life": params.training, "reward_clip": params.training, "noop_max": 30,
                "frame_skip": 4, "stack_num": 4, "img_height": 84, "img_width": 84, "gray_scale": True,
                "repeat_action_probability": sticky, "use_fire_reset": True}
        if params.max_episode_steps is not None:
            opts["max_episode_steps"] = params.max_episode_steps
        return f"{m.group(1)}-v5", opts
    if _MUJOCO.match(params.id) and not params.preset:
        opts = {}
        if params.max_episode_steps is not None:
            opts["max_episode_steps"] = params.max_episode_steps
        return params.id, opts
    return None


class EnvpoolWorker:
    """``num_envs`` envs of one envpool pool behind the ``EnvWorker`` contract (see the module docstring)."""

    def __init__(self, params: GymnasiumParams, *, num_envs: int, seed: int, worker_index: int = 0) -> None:
        import envpool

        task = envpool_task(params)
        if task is None:
            raise ValueError(f"env.params.vectorization: envpool has no env for {params.id!r}")
        self.params, self.num_envs, self.seed, self.worker_index = params, num_envs, seed, worker_index
        self._env = envpool.make(task[0], env_type="gymnasium", num_envs=num_envs, seed=seed, **task[1])
        self.observation_space = self._env.observation_space
        self.action_space = self._env.action_space
        self.observation_space.seed(seed)
        self.action_space.seed(seed)
        self._atari = params.preset == "atari"
        self._returns = np.zeros(num_envs, dtype=np.float64)
        self._lengths = np.zeros(num_envs, dtype=np.int64)
        self._has_reset = False

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every env (envpool seeds once per pool: a new ``seed`` is refused after construction)."""
        if seed is not None and seed != self.seed:
            raise ValueError("envpool workers are seeded once, when built (env.params.vectorization: envpool)")
        obs, _ = self._env.reset()
        self._has_reset = True
        self._returns[:] = 0.0
        self._lengths[:] = 0
        return np.array(obs)

    def step(self, actions: np.ndarray) -> StepBatch:
        """Step every env; ended envs are reset in the same step."""
        if not self._has_reset:
            raise RuntimeError(f"{self!r}: call reset() before step()")
        obs, reward, terminated, truncated, info = self._env.step(np.asarray(actions))
        obs = np.array(obs)
        raw = info["reward"] if self._atari else reward
        self._returns += raw
        self._lengths += 1
        done = terminated | truncated
        final_obs = None
        episodes: list[EpisodeStats] = []
        if done.any():
            ended = np.flatnonzero(done)
            final_obs = obs.copy()
            fresh, _ = self._env.reset(ended)
            obs[ended] = fresh
            game_over = (info["terminated"].astype(bool) | truncated) if self._atari else done
            for i in ended.tolist():
                if game_over[i]:
                    episodes.append(EpisodeStats(env_index=i, episode_return=float(self._returns[i]),
                                                 length=int(self._lengths[i])))
                    self._returns[i] = 0.0
                    self._lengths[i] = 0
        return StepBatch(obs=obs, reward=np.asarray(reward, dtype=np.float32), terminated=terminated,
                         truncated=truncated, final_obs=final_obs, episodes=episodes, metrics={})

    def close(self) -> None:
        """Nothing to release beyond the pool itself (freed with the worker)."""
        self._env.close()

    def state_dict(self) -> dict[str, Any] | None:
        """``None``: envpool's state cannot be captured; a resumed run resets the worker."""
        return None

    def __repr__(self) -> str:
        return f"EnvpoolWorker(id={self.params.id!r}, num_envs={self.num_envs}, worker_index={self.worker_index})"
