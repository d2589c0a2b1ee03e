"""``check_env``: does an env component honour :class:`~rlightning_core.env.base.EnvWorker`?

Modelled on Stable-Baselines3's ``check_env``: every problem is reported with the value that was wrong and
what to change.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from rlightning_core.testing._common import ConformanceReport, Subject, resolve_subject, space_dtype

__all__ = ["check_env"]

_MEMBERS = ("num_envs", "observation_space", "action_space", "reset", "step", "close")


def check_env(component: str | Callable[..., Any], params: Any = None, *, config: type | None = None,
              registry: Any = None, num_envs: int = 2, seed: int = 0, steps: int = 200) -> ConformanceReport:
    """Check an env component: construction, spaces, reset/step shapes and dtypes, episode ends, seeding.

    Args:
        component: a registered env name, or the factory itself.
        params: its params (a mapping as in a config file, an instance, or ``None`` for the defaults).
        config: the params class when ``component`` is a factory.
        registry: the registry to resolve a name against (default: this process's plugins).
        num_envs: envs per worker to build.
        seed: the worker seed and the reset seed.
        steps: random-action steps to take while checking (episode ends should occur within them).

    Returns:
        What was verified, and notes on what could not be exercised.

    Raises:
        ConformanceError: the first broken rule, with the fix.
    """
    s = resolve_subject("env", component, params, config=config, registry=registry)
    worker = _build(s, num_envs, seed)
    try:
        obs_space, act_space = _check_spaces(s, worker)
        obs = s.call(f"reset(seed={seed})", worker.reset, seed=seed)
        _check_obs(s, obs, obs_space, num_envs, "reset() observations")
        s.ok(f"reset(seed) returns observations shaped (num_envs, *observation_space.shape) = {obs.shape}")
        actions = _action_sampler(act_space, seed)
        ended = {"terminated": 0, "truncated": 0}
        episodes = _Episodes(num_envs, obs)
        for t in range(steps):
            batch = s.call(f"step(actions) at step {t}", worker.step, actions(num_envs))
            _check_step(s, batch, obs_space, num_envs, t, ended)
            episodes.step(s, batch, t)
        s.ok(f"{steps} steps: obs, float32 reward, bool terminated/truncated with the right shapes")
        if ended["terminated"] + ended["truncated"]:
            s.ok(f"episode ends ({ended['terminated']} terminated, {ended['truncated']} truncated) come with "
                 "final_obs and one EpisodeStats each")
            s.ok("every EpisodeStats: length within the steps since its episode began, episode_return the sum of "
                 "their rewards")
            episodes.check_autoreset(s)
        else:
            s.note(f"no episode ended within {steps} steps of random actions: final_obs and episode stats were "
                   "not checked (pass a larger steps=)")
        _check_determinism(s, worker, num_envs, seed, min(steps, 50))
    finally:
        s.call("close()", worker.close)
    s.ok("close() works")
    return s.report


def _build(s: Subject, num_envs: int, seed: int, *, record: bool = True) -> Any:
    worker = s.build(f"the factory (num_envs={num_envs}, seed={seed}, worker_index=0)", num_envs=num_envs,
                     seed=seed, worker_index=0)
    missing = [m for m in _MEMBERS if not hasattr(worker, m)]
    if missing:
        s.fail(f"the factory returned a {type(worker).__name__}, which lacks {', '.join(missing)}",
               "return an object with num_envs, observation_space, action_space, reset(seed=None), "
               "step(actions) -> StepBatch and close() (rlightning_core.env.base.EnvWorker)")
    if worker.num_envs != num_envs:
        s.fail(f"asked for num_envs={num_envs}, the worker has num_envs={worker.num_envs}",
               "build exactly num_envs environments (the keyword argument the factory receives)")
    if record:
        s.ok("the factory accepts (params, num_envs=, seed=, worker_index=) and returns an env worker")
    return worker


def _check_spaces(s: Subject, worker: Any) -> tuple[Any, Any]:
    from gymnasium import spaces

    for attr in ("observation_space", "action_space"):
        space = getattr(worker, attr)
        if not isinstance(space, spaces.Space):
            s.fail(f"{attr} is {space!r}, not a gymnasium space",
                   f"set {attr} to the single-env gymnasium.spaces instance (e.g. Box, Discrete)")
        if attr == "observation_space" and space.shape is None:
            s.fail(f"observation_space {space} has no shape",
                   "flatten composite observations (gymnasium.wrappers.FlattenObservation)")
    s.ok(f"spaces: observation {worker.observation_space}, action {worker.action_space}")
    return worker.observation_space, worker.action_space


def _check_obs(s: Subject, obs: Any, space: Any, n: int, what: str) -> None:
    if not isinstance(obs, np.ndarray):
        s.fail(f"{what} are a {type(obs).__name__}, not a numpy array",
               "return np.ndarray batches (stack the per-env observations)")
    want = (n, *space.shape)
    if obs.shape != want:
        s.fail(f"{what} have shape {obs.shape}, expected (num_envs, *observation_space.shape) = {want}",
               "return one observation per env, stacked on a leading num_envs axis")
    dtype = space_dtype(space)
    if dtype is not None and obs.dtype != dtype:
        s.fail(f"{what} have dtype {obs.dtype}, observation_space.dtype is {dtype}",
               f"cast observations with .astype(np.{dtype}) or declare the space with dtype=np.{obs.dtype}")
    for i in range(n):
        if not space.contains(obs[i]):
            s.fail(f"{what}: row {i} ({_short(obs[i])}) lies outside observation_space {space}",
                   "widen the space's bounds or clip the observations")


def _check_step(s: Subject, batch: Any, obs_space: Any, n: int, t: int, ended: dict[str, int]) -> None:
    from rlightning_core.env.base import EpisodeStats, StepBatch

    where = f"step() at step {t}"
    if not isinstance(batch, StepBatch):
        s.fail(f"{where} returned a {type(batch).__name__}",
               "return rlightning_core.env.base.StepBatch(obs=..., reward=..., terminated=..., truncated=...)")
    _check_obs(s, batch.obs, obs_space, n, f"{where}: obs")
    for name, dtype in (("reward", np.float32), ("terminated", np.bool_), ("truncated", np.bool_)):
        arr = getattr(batch, name)
        if not isinstance(arr, np.ndarray) or arr.shape != (n,):
            s.fail(f"{where}: {name} is {_short(arr)}, expected a numpy array of shape ({n},)",
                   f"return one {name} value per env")
        if arr.dtype != dtype:
            s.fail(f"{where}: {name} has dtype {arr.dtype}, expected {np.dtype(dtype)}",
                   f"convert with np.asarray({name}, dtype=np.{np.dtype(dtype)})")
    if not np.isfinite(batch.reward).all():
        s.fail(f"{where}: reward holds non-finite values {_short(batch.reward)}", "return finite rewards")
    done = batch.terminated | batch.truncated
    ended["terminated"] += int(batch.terminated.sum())
    ended["truncated"] += int((batch.truncated & ~batch.terminated).sum())
    if done.any():
        if batch.final_obs is None:
            s.fail(f"{where}: envs {np.flatnonzero(done).tolist()} ended but final_obs is None",
                   "set final_obs to the real last observations (rows where terminated | truncated); obs holds "
                   "the first observation of the next episode (autoreset)")
        _check_obs(s, batch.final_obs, obs_space, n, f"{where}: final_obs")
        indices = sorted(ep.env_index for ep in batch.episodes if isinstance(ep, EpisodeStats))
        if len(batch.episodes) != len(indices) or indices != np.flatnonzero(done).tolist():
            s.fail(f"{where}: envs {np.flatnonzero(done).tolist()} ended but episodes lists "
                   f"{[getattr(e, 'env_index', e) for e in batch.episodes]}",
                   "append one EpisodeStats(env_index, episode_return, length) per episode that ended")
        for ep in batch.episodes:
            if not np.isfinite(ep.episode_return) or ep.length < 1:
                s.fail(f"{where}: episode stats {ep} have a non-finite return or a length below 1",
                       "count the episode's summed reward and its number of steps")
    elif batch.episodes:
        s.fail(f"{where}: episodes {batch.episodes} reported but no env is terminated or truncated",
               "report EpisodeStats only on the step that ends the episode")
    if not isinstance(batch.metrics, dict) or not all(
            isinstance(k, str) and isinstance(v, list) for k, v in batch.metrics.items()):
        s.fail(f"{where}: metrics is {_short(batch.metrics)}", "metrics is a dict of name -> list of floats")


class _Episodes:
    """Counts each env's steps and rewards since its episode began, to hold ``EpisodeStats`` and autoreset to them.

    After ``reset(seed)`` every env starts an episode, and one that ends starts the next, so an episode's
    ``length`` cannot exceed the steps taken since then, and its ``episode_return`` is the sum of their rewards
    (an env may idle between episodes, as finished agents of a multi-agent env do, with reward 0: those steps
    need not count). An env whose ``obs`` is still the final observation at every episode end did not reset.
    """

    def __init__(self, n: int, reset_obs: np.ndarray) -> None:
        self.length = np.zeros(n, dtype=np.int64)
        self.ret = np.zeros(n, dtype=np.float64)
        self.first_obs = [np.array(row) for row in reset_obs]
        self.ends = 0
        self.not_reset: list[tuple[int, int, np.ndarray]] = []
        """``(step, env, final obs)`` of the ends after which ``obs`` still held the final observation."""

    def step(self, s: Subject, batch: Any, t: int) -> None:
        self.length += 1
        self.ret += np.asarray(batch.reward, dtype=np.float64)
        where = f"step() at step {t}"
        for ep in batch.episodes:
            i, counted, summed = ep.env_index, int(self.length[ep.env_index]), float(self.ret[ep.env_index])
            if ep.length > counted:
                s.fail(f"{where}: env {i}'s EpisodeStats say length={ep.length}, but only {counted} steps were "
                       "taken since reset() or since its previous episode ended",
                       "count each episode's steps and restart the count when the episode ends (autoreset); a "
                       "count that keeps growing across episodes means the env was not reset")
            if not np.isclose(ep.episode_return, summed, rtol=1e-4, atol=1e-4):
                s.fail(f"{where}: env {i}'s EpisodeStats say episode_return={ep.episode_return:.6g}, but the "
                       f"rewards of its {counted} steps sum to {summed:.6g}",
                       "report the undiscounted sum of the episode's rewards, as returned in StepBatch.reward, and "
                       "restart the sum when the episode ends")
        for i in np.flatnonzero(batch.terminated | batch.truncated).tolist():
            self.ends += 1
            if np.array_equal(batch.obs[i], batch.final_obs[i]):
                self.not_reset.append((t, i, np.array(batch.final_obs[i])))
            self.length[i], self.ret[i] = 0, 0.0

    def check_autoreset(self, s: Subject) -> None:
        """Fail if ``obs`` was the final observation at every end, and one of those is no first observation.

        An env whose first and last observations coincide (a constant observation) is not blamed: its final
        observations are among the ones ``reset()`` returned.
        """
        foreign = [(t, i, f) for t, i, f in self.not_reset if not any(np.array_equal(f, o) for o in self.first_obs)]
        if self.ends >= 2 and len(self.not_reset) == self.ends and foreign:
            t, i, final = foreign[0]
            s.fail(f"at all {self.ends} episode ends obs held the episode's final observation (e.g. env {i} at "
                   f"step {t}: {_short(final)}, which reset() never returned): the envs are not reset when an "
                   "episode ends",
                   "reset an env as soon as its episode ends (autoreset): obs holds the first observation of the "
                   "next episode, final_obs the last one of the episode that ended; a Gymnasium vector env "
                   "does this in the same step with autoreset_mode=AutoresetMode.SAME_STEP")
        s.ok(f"autoreset: after each of the {self.ends} episode ends obs holds a first observation")


def _check_determinism(s: Subject, worker: Any, n: int, seed: int, steps: int) -> None:
    actions = _action_sampler(worker.action_space, seed + 1)
    plan = [actions(n) for _ in range(steps)]
    fresh = []
    for _ in range(2):
        other = _build(s, n, seed, record=False)
        try:
            fresh.append(_trajectory(s, other, seed, plan))
        finally:
            s.call("close()", other.close)
    diff = _first_difference(fresh[0], fresh[1])
    if diff is not None:
        s.fail(f"two workers built with seed={seed} and reset with reset(seed={seed}) differ at {diff} under the "
               "same actions",
               "seed every env's RNG from the factory's seed and in reset(seed) (env i with seed + i), and draw "
               "all randomness from those RNGs")
    s.ok(f"the same seed gives the same {steps} steps in two fresh workers")
    diff = _first_difference(fresh[0], _trajectory(s, worker, seed, plan))
    if diff is None:
        s.ok("reset(seed) on a used worker replays the steps of a fresh one")
    else:
        s.note(f"reset(seed={seed}) on a used worker does not replay a fresh worker's steps (differs at {diff}): "
               "state survives reset, e.g. running statistics of a normalization wrapper")


def _first_difference(a: list[tuple[np.ndarray, ...]], b: list[tuple[np.ndarray, ...]]) -> str | None:
    for t, (x, y) in enumerate(zip(a, b, strict=True)):
        if not all(np.array_equal(u, v) for u, v in zip(x, y, strict=True)):
            return "the reset observations" if t == 0 else f"step {t - 1}"
    return None


def _trajectory(s: Subject, worker: Any, seed: int, plan: list[np.ndarray]) -> list[tuple[np.ndarray, ...]]:
    out: list[tuple[np.ndarray, ...]] = [(np.array(s.call("reset(seed)", worker.reset, seed=seed)),)]
    for actions in plan:
        b = s.call("step(actions)", worker.step, actions)
        out.append((np.array(b.obs), np.array(b.reward), np.array(b.terminated), np.array(b.truncated)))
    return out


def _action_sampler(space: Any, seed: int) -> Callable[[int], np.ndarray]:
    space = copy.deepcopy(space)
    space.seed(seed)
    return lambda n: np.stack([np.asarray(space.sample()) for _ in range(n)])


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
