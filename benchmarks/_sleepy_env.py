"""A CartPole whose every step also sleeps (like a physics simulator that costs real time), for scaling runs.

Registered as ``_sleepy_env:SleepyCartPole-v0`` (gymnasium imports this module by that id, in any process that
has ``benchmarks/`` on its path).
"""

from __future__ import annotations

import time

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class SleepyCartPole(CartPoleEnv):
    def __init__(self, step_sleep_s: float = 0.005, **kwargs):
        super().__init__(**kwargs)
        self.step_sleep_s = step_sleep_s

    def step(self, action):
        time.sleep(self.step_sleep_s)
        return super().step(action)


if "SleepyCartPole-v0" not in gym.registry:
    gym.register("SleepyCartPole-v0", entry_point=SleepyCartPole, max_episode_steps=500)
