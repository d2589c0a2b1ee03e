"""Fixtures of the pettingzoo plugin's tests: a parallel env whose agents finish at different steps."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo import ParallelEnv

from rlightning_core.plugins import reset_plugins


class RelayEnv(ParallelEnv):
    """Agent ``k`` of ``agent_0 .. agent_{A-1}`` earns 1 per step and finishes after ``2 * (k + 1)`` steps:
    terminated, except the last agent, which is truncated. Observations are ``[t, k, seed]``; acting for a
    finished agent is an error, as in PettingZoo."""

    metadata: dict[str, Any] = {"name": "relay_v0", "render_modes": ["rgb_array"]}

    def __init__(self, num_agents: int = 3, obs_low: float = -1.0, render_mode: str | None = None,
                 wide_agent: bool = False) -> None:
        self.possible_agents = [f"agent_{k}" for k in range(num_agents)]
        self.render_mode = render_mode
        self._obs_low = obs_low
        self._wide = wide_agent
        self.agents: list[str] = []
        self.t = 0
        self.seed_value = 0.0

    def observation_space(self, agent: str) -> spaces.Space:
        dim = 4 if self._wide and agent == self.possible_agents[-1] else 3
        return spaces.Box(self._obs_low, 1000.0, (dim,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(2)

    def _obs(self, agent: str) -> np.ndarray:
        k = self.possible_agents.index(agent)
        return np.array([self.t, k, self.seed_value], dtype=np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.seed_value = float(seed)
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        if set(actions) != set(self.agents):
            raise AssertionError(f"actions for {sorted(actions)}, live agents {self.agents}")
        self.t += 1
        last = self.possible_agents[-1]
        obs = {a: self._obs(a) for a in self.agents}
        rewards = {a: 1.0 for a in self.agents}
        ends = {a: self.t >= 2 * (self.possible_agents.index(a) + 1) for a in self.agents}
        terminations = {a: ends[a] and a != last for a in self.agents}
        truncations = {a: ends[a] and a == last for a in self.agents}
        infos: dict[str, dict] = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not ends[a]]
        return obs, rewards, terminations, truncations, infos

    def render(self) -> np.ndarray:
        return np.full((4, 4, 3), self.t, dtype=np.uint8)


@pytest.fixture
def relay_env() -> type[RelayEnv]:
    return RelayEnv


@pytest.fixture(autouse=True)
def _isolated_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in ("RLIGHTNING_LOAD_PLUGINS", "RLIGHTNING_DISABLE_PLUGINS", "RLIGHTNING_STRICT_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    reset_plugins()
    yield
    reset_plugins()
