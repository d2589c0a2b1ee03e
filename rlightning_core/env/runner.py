"""The env-runner: one env worker stepping together with a rollout copy of the policy.

This is the hot loop of collection (DESIGN §4, *env-runner* topology): a runner steps its envs for ``T`` steps,
calling the policy on each observation batch, and returns one :class:`~rlightning_core.buffer.base.Chunk` —
one round trip per chunk when the runner is a Ray actor, plain calls in one process.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from rlightning_core.buffer.base import Chunk
from rlightning_core.env.base import EnvWorker, EpisodeStats
from rlightning_core.policy.base import BasePolicy
from rlightning_core.preprocess.base import Preprocessor

__all__ = ["EnvRunner", "EnvStepError", "RolloutStats"]


class EnvStepError(RuntimeError):
    """An env raised in ``step``; the message names the worker and the actions it was given."""


@attrs.define
class RolloutStats:
    """What a runner observed while collecting one chunk (besides the transitions)."""

    label: str
    episodes: list[EpisodeStats] = attrs.Factory(list)
    metrics: dict[str, list[float]] = attrs.Factory(dict)
    env_s: float = 0.0
    """Seconds spent stepping envs."""
    inference_s: float = 0.0
    """Seconds spent in the policy (and preprocessors)."""
    steps: int = 0
    """Env steps (transitions) collected."""
    weight_version: int = 0
    """Version of the weights the chunk was collected with (policy lag = learner version - this)."""
    preprocessor_states: list[dict[str, Any]] | None = None
    """Remote runners report their preprocessor statistics for merging (``None`` in one process)."""


def _space_array(space: Any, lead: tuple[int, ...]) -> np.ndarray:
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return np.zeros(lead, dtype=np.int64)
    if isinstance(space, spaces.MultiDiscrete | spaces.MultiBinary):
        return np.zeros(lead + tuple(space.shape), dtype=np.int64)
    return np.zeros(lead + tuple(space.shape), dtype=np.float32)


class EnvRunner:
    """Steps ``worker`` with ``policy`` for chunks of ``T`` steps.

    Args:
        worker: the env worker (a vector of ``num_envs`` envs).
        policy: a rollout (EVAL) policy; may be shared by several runners in one process.
        preprocessors: applied in order to observations (and rewards) before the policy and the buffer see them.
        column: first buffer column this runner fills.
        label: the env config's label, for per-config statistics.
        needs_next_obs: also record the true next observation of every step (off-policy buffers).
        env_ret_fn: optional ``StepBatch -> StepBatch`` applied to every env return.
        policy_resp_fn: optional ``PolicyOutput -> PolicyOutput`` applied to every policy response.
    """

    def __init__(self, worker: EnvWorker, policy: BasePolicy, preprocessors: Sequence[Preprocessor] = (), *,
                 column: int = 0, label: str = "env", needs_next_obs: bool = False,
                 env_ret_fn: Any = None, policy_resp_fn: Any = None) -> None:
        self.worker = worker
        self.policy = policy
        self.preprocessors = list(preprocessors)
        self.column = column
        self.label = label
        self.needs_next_obs = needs_next_obs
        self.env_ret_fn = env_ret_fn
        self.policy_resp_fn = policy_resp_fn
        self.num_envs = int(worker.num_envs)
        self._has_value = type(policy).value is not BasePolicy.value
        self._obs: np.ndarray | None = None
        self.total_steps = 0

    def _pre_obs(self, obs: np.ndarray, update: bool) -> np.ndarray:
        for p in self.preprocessors:
            obs = p.obs(obs, update=update)
        return obs

    def reset(self, seed: int | None = None) -> None:
        """Reset the envs (seeded) and start a fresh sequence."""
        self._obs = self._pre_obs(self.worker.reset(seed=seed), True)

    def collect(self, num_steps: int) -> tuple[Chunk, RolloutStats]:
        """Step ``num_steps`` times; returns the transitions and what was observed on the way."""
        if self._obs is None:
            self.reset()
        obs = self._obs
        assert obs is not None
        n, policy, worker = self.num_envs, self.policy, self.worker
        obs_buf = np.zeros((num_steps, *obs.shape), dtype=obs.dtype)
        act_buf = _space_array(worker.action_space, (num_steps, n))
        rew_buf = np.zeros((num_steps, n), dtype=np.float32)
        term_buf = np.zeros((num_steps, n), dtype=bool)
        trunc_buf = np.zeros((num_steps, n), dtype=bool)
        boot_buf = np.zeros((num_steps, n), dtype=np.float32) if self._has_value else None
        next_buf = np.zeros_like(obs_buf) if self.needs_next_obs else None
        extras: dict[str, np.ndarray] = {}
        stats = RolloutStats(label=self.label)
        pre, has_reward_pre = self.preprocessors, any(
            type(p).reward is not Preprocessor.reward for p in self.preprocessors)
        clock = time.perf_counter
        env_s = inf_s = 0.0
        for t in range(num_steps):
            t0 = clock()
            out = policy.act(obs)
            if self.policy_resp_fn is not None:
                out = self.policy_resp_fn(out)
            t1 = clock()
            actions = out.env_actions if out.env_actions is not None else out.actions
            try:
                step = worker.step(actions)
            except Exception as exc:
                raise EnvStepError(f"env worker {self.label!r} (buffer columns {self.column}.."
                                   f"{self.column + n - 1}) failed in step() with actions {actions!r}: "
                                   f"{type(exc).__name__}: {exc}") from exc
            t2 = clock()
            if self.env_ret_fn is not None:
                step = self.env_ret_fn(step)
            env_s += t2 - t1
            obs_buf[t] = obs
            act_buf[t] = out.actions
            for key, value in out.extras.items():
                buf = extras.get(key)
                if buf is None:
                    buf = extras[key] = np.zeros((num_steps, *value.shape), dtype=value.dtype)
                buf[t] = value
            reward = step.reward
            if has_reward_pre:
                done = step.terminated | step.truncated
                for p in pre:
                    reward = p.reward(reward, done, update=True)
            rew_buf[t] = reward
            term_buf[t] = step.terminated
            trunc_buf[t] = step.truncated
            next_obs = self._pre_obs(step.obs, True) if pre else step.obs
            if step.final_obs is not None:
                done = step.terminated | step.truncated
                final = self._pre_obs(step.final_obs, False) if pre else step.final_obs
                if next_buf is not None:
                    next_buf[t] = next_obs
                    next_buf[t, done] = final[done]
                if boot_buf is not None and step.truncated.any():
                    idx = np.flatnonzero(step.truncated)
                    boot_buf[t, idx] = policy.value(final[idx])
            elif next_buf is not None:
                next_buf[t] = next_obs
            if step.episodes:
                stats.episodes.extend(step.episodes)
            for key, values in step.metrics.items():
                stats.metrics.setdefault(key, []).extend(values)
            obs = next_obs
            inf_s += (t1 - t0) + (clock() - t2)
        self._obs = obs
        data = {"obs": obs_buf, "actions": act_buf, "rewards": rew_buf, "terminated": term_buf,
                "truncated": trunc_buf, **extras}
        if boot_buf is not None:
            data["bootstrap_values"] = boot_buf
        if next_buf is not None:
            data["next_obs"] = next_buf
        last_values = policy.value(obs) if self._has_value else None
        self.total_steps += num_steps * n
        stats.env_s, stats.inference_s, stats.steps = env_s, inf_s, num_steps * n
        stats.weight_version = policy.weight_version
        chunk = Chunk(data=data, last_obs=obs, last_values=last_values, weight_version=policy.weight_version,
                      column=self.column, env_label=self.label)
        return chunk, stats

    # -- state (checkpoints) ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The current observation and, when the worker supports it, the envs' own state."""
        state: dict[str, Any] = {"obs": None if self._obs is None else np.array(self._obs)}
        get_state = getattr(self.worker, "state_dict", None)
        state["worker"] = get_state() if callable(get_state) else None
        return state

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        """Restore :meth:`state_dict`; returns ``False`` if the envs could not be restored (reset instead)."""
        load = getattr(self.worker, "load_state_dict", None)
        if state.get("worker") is not None and callable(load):
            load(state["worker"])
            self._obs = state["obs"]
            return True
        return False
