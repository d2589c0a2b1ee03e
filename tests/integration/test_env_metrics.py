"""Numbers an env reports in info["metrics"] reach every logger under env/<label>/..."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

pytestmark = pytest.mark.usefixtures("training_plugins")


class AngleReportingCartPole(CartPoleEnv):
    """CartPole that reports |pole angle| as an env-side metric on every step."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {**info, "metrics": {"pole_angle": abs(float(obs[2]))}}


def test_env_metrics_are_aggregated_per_env_config(tmp_path, cartpole_config, build_run):
    if "AngleCartPole-v0" not in gym.registry:
        gym.register("AngleCartPole-v0", entry_point=AngleReportingCartPole, max_episode_steps=500)
    config = cartpole_config("env.params.id=AngleCartPole-v0", "env.name=angle", "engine.total_steps=512",
                             "engine.eval_every=0", "checkpoint.every=0")
    build_run(config).run(tmp_path / "run")
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    values = [r["env/angle/pole_angle"] for r in rows if "env/angle/pole_angle" in r]
    assert len(values) == 2
    assert all(0 <= v < 0.21 for v in values)  # CartPole terminates beyond 12 degrees (0.2095 rad)


class ExplodingCartPole(CartPoleEnv):
    """Raises on its 20th step (a simulator crash)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps == 20:
            raise RuntimeError("simulator exploded")
        return super().step(action)


def test_an_env_crash_names_the_worker_and_the_actions(tmp_path, cartpole_config, build_run):
    from rlightning_core.errors import RestartsUsedUpError

    if "ExplodingCartPole-v0" not in gym.registry:
        gym.register("ExplodingCartPole-v0", entry_point=ExplodingCartPole, max_episode_steps=500)
    config = cartpole_config("env.params.id=ExplodingCartPole-v0", "env.name=boom", "engine.total_steps=512",
                             "engine.eval_every=0", "checkpoint.every=0", "cluster.max_restarts=0")
    expected = r"env\[0\] \(boom, type 'gymnasium'\) worker 0 .*failed in step\(\) with actions array\(\["
    with pytest.raises(RestartsUsedUpError, match=expected) as info:
        build_run(config).run(tmp_path / "run")
    assert "simulator exploded" in str(info.value)
