"""A vector env worker over copies of a PettingZoo parallel env: one env slot per (copy, agent).

Slot ``i`` is agent ``i % A`` (in ``possible_agents`` order) of copy ``i // A``, where ``A`` is the number of
agents; a worker with ``num_envs`` slots runs ``num_envs / A`` copies. Every agent must have the same observation
and action spaces, so one policy acts for all of them: parameter sharing, with no change to the algorithm.

Agents that finish before the others ("dead" agents, removed from ``env.agents``) report their end on the step
it happens (``terminated`` / ``truncated``, ``final_obs``, one :class:`EpisodeStats`), then idle until every
agent of their copy is done and the copy resets: an idle slot observes the zero observation (clipped into the
space's bounds), gets reward 0, is neither terminated nor truncated, and its actions are ignored.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from rlightning_core.env.base import EpisodeStats, StepBatch
from rlightning_core.errors import UserError
from rlightning_pettingzoo.deps import translate_import_error
from rlightning_pettingzoo.params import ENV_MODULE_PATTERN, PettingZooParams

__all__ = ["PettingZooWorker", "make_parallel_env"]


def make_parallel_env(params: PettingZooParams, render_mode: str | None = None) -> Any:
    """One copy of the parallel env named by ``params.env``."""
    if not ENV_MODULE_PATTERN.match(params.env):  # params built without validation (attrs.evolve, tests)
        raise UserError(f"env.params.env: {params.env!r} is not a PettingZoo env module")
    try:
        module = importlib.import_module(params.env)
    except ModuleNotFoundError as exc:  # a package the env imports and that no extra of this plugin covers
        missing = translate_import_error(exc, params.env)
        if missing is None:
            raise
        raise missing from None
    if not hasattr(module, "parallel_env"):
        raise UserError(f"env.params.env: module {params.env!r} has no parallel_env(); name a PettingZoo env")
    kwargs = dict(params.kwargs)
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    try:
        return module.parallel_env(**kwargs)
    except TypeError as exc:
        raise UserError(f"env.params.kwargs: {params.env}.parallel_env() refused {sorted(kwargs)}: {exc}") from None


def _shared_spaces(env: Any, name: str) -> tuple[Any, Any]:
    """The observation and action space every agent shares; refuses agents with different spaces."""
    agents = list(env.possible_agents)
    groups: list[tuple[Any, Any, list[str]]] = []
    for agent in agents:
        obs_space, act_space = env.observation_space(agent), env.action_space(agent)
        for g in groups:
            if g[0] == obs_space and g[1] == act_space:
                g[2].append(agent)
                break
        else:
            groups.append((obs_space, act_space, [agent]))
    if len(groups) > 1:
        lines = "; ".join(f"{g[2]}: observation {g[0]}, action {g[1]}" for g in groups)
        raise UserError(
            f"env.params.env: the agents of {name} do not share observation and action spaces, so one policy "
            f"cannot act for all of them ({lines}). The pettingzoo env supports tasks whose agents all have the "
            "same spaces (parameter sharing)"
        )
    return groups[0][0], groups[0][1]


def _idle_obs(space: Any) -> np.ndarray:
    """What an idle (dead) agent's slot observes: zeros, clipped into a Box's bounds."""
    from gymnasium import spaces

    zero = np.zeros(space.shape, dtype=space.dtype)
    if isinstance(space, spaces.Box):
        zero = np.clip(zero, space.low, space.high).astype(space.dtype)
    return zero


class PettingZooWorker:
    """``num_envs`` agent slots over ``num_envs / A`` copies of a PettingZoo parallel env (``A`` agents each).

    Args:
        params: which env, with what ``parallel_env`` arguments.
        num_envs: slots (a multiple of the env's number of agents).
        seed: copy ``c`` is reset with ``seed + c * A`` (the seed of its first slot).
        worker_index: index of this worker in its env group (unused: seeds come from ``seed``).
        render_mode: passed to every copy (``rgb_array`` for videos).
        env_fn: builds one copy from ``render_mode`` instead of ``params.env`` (Python callers with an env of
            their own; a config file can only name a module).

    Raises:
        UserError: ``num_envs`` is not a multiple of the number of agents, or the agents' spaces differ.
    """

    def __init__(self, params: PettingZooParams, *, num_envs: int, seed: int, worker_index: int = 0,
                 render_mode: str | None = None, env_fn: Callable[[str | None], Any] | None = None) -> None:
        self.params = params
        self.render_mode = render_mode
        make = env_fn if env_fn is not None else (lambda mode: make_parallel_env(params, mode))
        first = make(render_mode)
        self.name = params.env if env_fn is None else type(first).__name__
        self.agents: list[str] = list(first.possible_agents)
        n_agents = len(self.agents)
        if n_agents == 0:
            first.close()
            raise UserError(f"env.params.env: {self.name} has no agents")
        if num_envs % n_agents:
            first.close()
            raise UserError(
                f"env.num_envs: {self.name} has {n_agents} agents ({', '.join(self.agents)}) and each agent is "
                f"one env slot, so num_envs must be a multiple of {n_agents}, got {num_envs} (evaluation envs "
                f"have one slot per episode: engine.eval_episodes and `rlightning eval -n` must be multiples of "
                f"{n_agents} too)"
            )
        try:
            self.observation_space, self.action_space = _shared_spaces(first, self.name)
        except UserError:
            first.close()
            raise
        self.num_envs = num_envs
        self.num_agents = n_agents
        self.num_copies = num_envs // n_agents
        self.envs = [first] + [make(render_mode) for _ in range(self.num_copies - 1)]
        self.metadata: dict[str, Any] = dict(getattr(first, "metadata", {}) or {})
        self.seed = seed
        self._idle = _idle_obs(self.observation_space)
        shape = (self.num_copies, n_agents)
        self._alive = np.zeros(shape, dtype=bool)
        self._returns = np.zeros(shape, dtype=np.float64)
        self._lengths = np.zeros(shape, dtype=np.int64)
        self._obs = np.repeat(self._idle[None], num_envs, axis=0)
        self._discrete = np.issubdtype(np.dtype(self.action_space.dtype), np.integer)

    # -- EnvWorker -------------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every copy (copy ``c`` with ``seed + c * A`` when ``seed`` is given); returns slot observations."""
        for c in range(self.num_copies):
            self._reset_copy(c, None if seed is None else seed + c * self.num_agents)
        return self._obs.copy()

    def step(self, actions: np.ndarray) -> StepBatch:
        """Step every copy with the actions of its live agents; copies whose agents are all done reset."""
        n, a_n = self.num_envs, self.num_agents
        actions = np.asarray(actions)
        reward = np.zeros(n, dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        final_obs: np.ndarray | None = None
        episodes: list[EpisodeStats] = []
        metrics: dict[str, list[float]] = {}
        for c, env in enumerate(self.envs):
            live = [(k, agent) for k, agent in enumerate(self.agents) if self._alive[c, k]]
            if not live:  # nothing to step (an env that started with no agents): restart it
                self._reset_copy(c, None)
                continue
            act = {agent: self._action(actions[c * a_n + k]) for k, agent in live}
            obs, rew, term, trunc, _infos = env.step(act)
            remaining = set(env.agents)
            for k, agent in live:
                i = c * a_n + k
                r = float(rew.get(agent, 0.0))
                reward[i] = r
                self._returns[c, k] += r
                self._lengths[c, k] += 1
                is_term = bool(term.get(agent, False))
                is_trunc = bool(trunc.get(agent, False)) or agent not in remaining
                agent_obs = obs.get(agent)
                if is_term or is_trunc:
                    if final_obs is None:
                        final_obs = self._obs.copy()
                    final_obs[i] = self._idle if agent_obs is None else agent_obs
                    terminated[i] = is_term
                    truncated[i] = is_trunc and not is_term
                    episodes.append(EpisodeStats(env_index=i, episode_return=float(self._returns[c, k]),
                                                 length=int(self._lengths[c, k])))
                    metrics.setdefault(f"agent/{agent}/episode_return", []).append(float(self._returns[c, k]))
                    self._alive[c, k] = False
                    self._obs[i] = self._idle
                else:
                    self._obs[i] = agent_obs
            for k in range(a_n):  # idle slots: zero observation, zero reward, not done
                if not self._alive[c, k] and not (terminated[c * a_n + k] or truncated[c * a_n + k]):
                    self._obs[c * a_n + k] = self._idle
            if not self._alive[c].any():
                metrics.setdefault("team_episode_return", []).append(float(self._returns[c].sum()))
                self._reset_copy(c, None)
        return StepBatch(obs=self._obs.copy(), reward=reward, terminated=terminated, truncated=truncated,
                         final_obs=final_obs, episodes=episodes, metrics=metrics)

    def close(self) -> None:
        """Close every copy."""
        for env in self.envs:
            env.close()

    # -- extras ----------------------------------------------------------------------------------------------
    def render(self) -> tuple[Any, ...]:
        """One frame per slot (with ``render_mode="rgb_array"``): each copy's frame, repeated for its agents."""
        frames = [env.render() for env in self.envs]
        return tuple(frames[i // self.num_agents] for i in range(self.num_envs))

    def __repr__(self) -> str:
        return (f"PettingZooWorker({self.name}, {self.num_copies} copies x {self.num_agents} agents "
                f"= {self.num_envs} slots)")

    # -- internals -------------------------------------------------------------------------------------------
    def _reset_copy(self, c: int, seed: int | None) -> None:
        obs, _infos = self.envs[c].reset(seed=seed)
        for k, agent in enumerate(self.agents):
            i = c * self.num_agents + k
            alive = agent in obs
            self._alive[c, k] = alive
            self._obs[i] = obs[agent] if alive else self._idle
        self._returns[c] = 0.0
        self._lengths[c] = 0

    def _action(self, action: np.ndarray) -> Any:
        return int(action) if self._discrete and np.ndim(action) == 0 else np.asarray(action)
