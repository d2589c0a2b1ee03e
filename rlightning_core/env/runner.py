"""The env-runner: one env worker stepping together with a rollout copy of the policy.

This is the hot loop of collection (the ``env_runner`` topology, docs/ray.md): a runner steps its envs for
``T`` steps, calling the policy on each observation batch, and returns one
:class:`~rlightning_core.buffer.base.Chunk` — one round trip per chunk when the runner is a Ray actor, plain
calls in one process.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from rlightning_core.buffer.base import Chunk
from rlightning_core.env.base import EnvWorker, EpisodeStats
from rlightning_core.errors import PreprocessFnError, RestartsUsedUpError
from rlightning_core.policy.base import BasePolicy, initial_state_of
from rlightning_core.preprocess.base import Preprocessor

__all__ = ["EnvRunner", "EnvStepError", "RestartBudget", "RolloutStats"]

log = logging.getLogger("rlightning")

#: A function that builds a replacement for a failed worker: ``(restart number) -> (worker, reset seed)``.
Rebuild = Callable[[int], tuple[EnvWorker, int]]


class EnvStepError(RuntimeError):
    """An env worker failed: it raised in ``step``/``reset``, hung past ``env.step_timeout_s``, or returned NaN/inf.

    The message names the worker, the phase and the actions it was given.

    Attributes:
        label: the env config's label.
        phase: ``step`` or ``reset``.
        kind: ``raised``, ``hung``, ``non_finite``, or ``config``: the first reset of a worker raised
            ``TypeError``/``ValueError`` (see :mod:`rlightning_core.env.faults`).
    """

    def __init__(self, message: str, *, label: str = "", phase: str = "step", kind: str = "raised") -> None:
        super().__init__(message)
        self.label, self.phase, self.kind = label, phase, kind


class RestartBudget:
    """``cluster.max_restarts``: how many failed env workers a run recreates, over all its workers.

    Args:
        max_restarts: restarts allowed in the whole run.
    """

    def __init__(self, max_restarts: int) -> None:
        self.max_restarts = int(max_restarts)
        self.used = 0

    def take(self, who: str, exc: BaseException) -> None:
        """Spend one restart on ``who``; raise :class:`RestartsUsedUpError` when none is left."""
        if self.used >= self.max_restarts:
            raise RestartsUsedUpError(who, self.max_restarts, exc) from exc
        self.used += 1


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
    restarts: int = 0
    """Times the worker failed and was recreated while collecting this chunk."""
    dropped_episodes: int = 0
    """Episodes in flight on a failed worker, dropped with it."""
    weight_fingerprint: dict[str, Any] | None = None
    """Ray mode: the fingerprint of the weights of ``weight_version``, on the first chunk collected with them
    (:mod:`rlightning_core.weights.fingerprint`; the driver checks it against the learner's)."""


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
        policy: a rollout policy; may be shared by several runners in one process.
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
        #: A recurrent policy's state of this runner's envs (``BasePolicy.initial_state``); ``None``: stateless.
        self._state: np.ndarray | None = None
        self.total_steps = 0
        self.rebuild: Rebuild | None = None
        self.budget: RestartBudget | None = None
        self.who = f"env worker {label!r}"
        self.restarts = 0
        self.config_path = "env"
        """Key path of this worker's env config (``env[0]``), named when the env refuses its params."""
        self._ran = False  # whether this worker has ever reset
        self._restart_seed: int | None = None
        self._pending_faults = (0, 0)

    def enable_restarts(self, rebuild: Rebuild, budget: RestartBudget, who: str | None = None,
                        config_path: str | None = None) -> None:
        """Recreate the worker with ``rebuild`` when it fails, within the run's ``budget``.

        Without this (e.g. inside a Ray actor, where the driver recreates the whole actor), a failure raises
        :class:`EnvStepError`. Either way a worker whose first reset raises ``TypeError``/``ValueError`` is not
        recreated: :class:`~rlightning_core.env.faults.EnvConfigError` (its params are wrong).
        """
        self.rebuild, self.budget = rebuild, budget
        if who:
            self.who = who
        if config_path:
            self.config_path = config_path

    def _fail(self, phase: str, exc: BaseException, actions: Any = None) -> EnvStepError:
        from rlightning_core.env.faults import CONFIG_SHAPED
        from rlightning_core.env.isolated import EnvTimeoutError

        kind = "hung" if isinstance(exc, EnvTimeoutError) else "raised"
        if phase == "reset" and not self._ran and isinstance(exc, CONFIG_SHAPED):
            kind = "config"  # its first reset: see rlightning_core.env.faults
        what = "hung in" if kind == "hung" else "failed in"
        acts = f" with actions {actions!r}" if actions is not None else ""
        cols = f"buffer columns {self.column}..{self.column + self.num_envs - 1}"
        return EnvStepError(f"{self.who} ({cols}) {what} {phase}(){acts}: {type(exc).__name__}: {exc}",
                            label=self.label, phase=phase, kind=kind)

    def _non_finite(self, phase: str, obs: np.ndarray, reward: Any = None, actions: Any = None) -> None:
        """Raise :class:`EnvStepError` when float observations (or rewards) hold NaN or inf."""
        bad = obs.dtype.kind == "f" and not np.isfinite(obs).all()
        bad_reward = reward is not None and not np.isfinite(reward).all()
        if bad or bad_reward:
            what = "observations" if bad else "rewards"
            acts = f" after actions {actions!r}" if actions is not None else ""
            raise EnvStepError(f"{self.who} (buffer columns {self.column}..{self.column + self.num_envs - 1}) "
                               f"returned non-finite {what} from {phase}(){acts}", label=self.label,
                               phase=phase, kind="non_finite")

    def _recover(self, exc: EnvStepError) -> None:
        """Replace the failed worker (budget permitting); its episodes in flight are lost, the next use resets it."""
        if self.rebuild is None or self.budget is None:
            raise exc  # the worker's owner decides (the Ray driver, for an actor's runner)
        if exc.kind == "config" and self.restarts == 0:  # the worker built from the config never ran
            from rlightning_core.env.faults import env_config_error

            raise env_config_error(self.config_path, str(exc)) from exc
        self.budget.take(self.who, exc)
        self.restarts += 1
        log.warning("%s; recreating the worker (restart %d of %d in this run, %d episode(s) in flight dropped)",
                    str(exc).splitlines()[0], self.budget.used, self.budget.max_restarts, self.num_envs)
        old = self.worker
        kill = getattr(old, "kill", None)
        with contextlib.suppress(Exception):  # it failed already; closing may fail too
            (kill if callable(kill) else old.close)()
        self.worker, self._restart_seed = self.rebuild(self.restarts)
        self._ran = False
        restarts, dropped = self._pending_faults
        self._pending_faults = (restarts + 1, dropped + self.num_envs)
        self._obs = None  # the next collect resets the new worker with its own seed

    def _pre_obs(self, obs: np.ndarray, update: bool) -> np.ndarray:
        for p in self.preprocessors:
            obs = p.obs(obs, update=update)
        return obs

    def _reset_once(self, seed: int | None) -> None:
        try:
            obs = self.worker.reset(seed=seed)
        except PreprocessFnError:
            raise  # the user's preprocess fn, not the env: recreating the worker would not help
        except Exception as exc:
            raise self._fail("reset", exc) from exc
        self._ran = True
        self._non_finite("reset", obs)
        self._obs = self._pre_obs(obs, True)
        self._state = initial_state_of(self.policy, self.num_envs)

    def reset(self, seed: int | None = None) -> None:
        """Reset the envs (seeded) and start a fresh sequence; a failing worker is recreated (if enabled)."""
        while True:
            try:
                self._reset_once(seed)
                return
            except EnvStepError as exc:
                self._recover(exc)
                seed = self._restart_seed

    def collect(self, num_steps: int) -> tuple[Chunk, RolloutStats]:
        """Step ``num_steps`` times; returns the transitions and what was observed on the way.

        When the worker fails (raises, hangs past ``env.step_timeout_s``, or returns NaN/inf) and restarts are
        enabled, the partial chunk is discarded, the worker recreated and the chunk collected again from the
        fresh worker; ``RolloutStats.restarts`` / ``dropped_episodes`` count what was lost.
        """
        while True:
            try:
                chunk, stats = self._collect(num_steps)
            except EnvStepError as exc:
                self._recover(exc)
                continue
            stats.restarts, stats.dropped_episodes = self._pending_faults
            self._pending_faults = (0, 0)
            return chunk, stats

    def _collect(self, num_steps: int) -> tuple[Chunk, RolloutStats]:
        if self._obs is None:
            self.reset(self._restart_seed)
        obs = self._obs
        assert obs is not None
        n, policy, worker = self.num_envs, self.policy, self.worker
        state = self._state  # recurrent policies: one row per env, carried across chunks
        state0 = None if state is None else initial_state_of(policy, n)
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
            out = policy.act(obs) if state is None else policy.act(obs, state=state)
            if self.policy_resp_fn is not None:
                out = self.policy_resp_fn(out)
            t1 = clock()
            actions = out.env_actions if out.env_actions is not None else out.actions
            try:
                step = worker.step(actions)
            except PreprocessFnError:
                raise
            except Exception as exc:
                raise self._fail("step", exc, actions) from exc
            if step.obs.dtype.kind == "f" and not math.isfinite(step.obs.sum() + step.reward.sum()):
                self._non_finite("step", step.obs, step.reward, actions)  # exact check (a sum may overflow)
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
                    boot_buf[t, idx] = (policy.value(final[idx]) if state is None
                                        else policy.value(final[idx], state=out.state[idx]))
            elif next_buf is not None:
                next_buf[t] = next_obs
            if step.episodes:
                stats.episodes.extend(step.episodes)
            for key, values in step.metrics.items():
                stats.metrics.setdefault(key, []).extend(values)
            obs = next_obs
            if state is not None:  # the next state; envs whose episode ended start again from the initial one
                ended = (step.terminated | step.truncated).reshape(n, *([1] * (out.state.ndim - 1)))
                state = np.where(ended, state0, out.state)
            inf_s += (t1 - t0) + (clock() - t2)
        self._obs = obs
        self._state = state
        data = {"obs": obs_buf, "actions": act_buf, "rewards": rew_buf, "terminated": term_buf,
                "truncated": trunc_buf, **extras}
        if boot_buf is not None:
            data["bootstrap_values"] = boot_buf
        if next_buf is not None:
            data["next_obs"] = next_buf
        last_values = (None if not self._has_value else policy.value(obs) if state is None
                       else policy.value(obs, state=state))
        self.total_steps += num_steps * n
        stats.env_s, stats.inference_s, stats.steps = env_s, inf_s, num_steps * n
        stats.weight_version = policy.weight_version
        chunk = Chunk(data=data, last_obs=obs, last_values=last_values, weight_version=policy.weight_version,
                      column=self.column, env_label=self.label)
        return chunk, stats

    # -- state (checkpoints) ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The current observation, a recurrent policy's per-env state, and the envs' own state (if supported)."""
        state: dict[str, Any] = {"obs": None if self._obs is None else np.array(self._obs)}
        if self._state is not None:
            state["policy_state"] = np.array(self._state)
        get_state = getattr(self.worker, "state_dict", None)
        state["worker"] = get_state() if callable(get_state) else None
        return state

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        """Restore :meth:`state_dict`; returns ``False`` if the envs could not be restored (reset instead)."""
        load = getattr(self.worker, "load_state_dict", None)
        if state.get("worker") is not None and callable(load):
            load(state["worker"])
            self._obs = state["obs"]
            if state.get("policy_state") is not None:  # else the recurrent state starts over (saved stateless)
                self._state = np.array(state["policy_state"])
            elif self._obs is not None:
                self._state = initial_state_of(self.policy, self.num_envs)
            return True
        return False
