"""CartPoles for the Ray benchmarks, registered in any process that has ``benchmarks/`` on its path (gymnasium
imports this module by the id's prefix).

- ``_sleepy_env:SleepyCartPole-v0``: every step also sleeps (like a physics simulator that costs real time), for
  scaling runs.
- ``_sleepy_env:StampedCartPole-v0``: a plain CartPole whose first step in any process writes the wall-clock
  time and the process id to the file ``$RLBENCH_FIRST_STEP`` (once per file), so that a benchmark can time a
  run from its CLI command to its first env step.
"""

from __future__ import annotations

import json
import os
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


class StampedCartPole(CartPoleEnv):
    def step(self, action):
        path = os.environ.get("RLBENCH_FIRST_STEP")
        if path and not getattr(self, "_stamped", False):
            self._stamped = True
            stamp = json.dumps({"t": time.time(), "pid": os.getpid()})
            try:  # the first writer wins; the rest find the file there
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            except FileExistsError:
                pass
            else:
                with os.fdopen(fd, "w") as f:
                    f.write(stamp)
        return super().step(action)


if "StampedCartPole-v0" not in gym.registry:
    gym.register("StampedCartPole-v0", entry_point=StampedCartPole, max_episode_steps=500)
if "SleepyCartPole-v0" not in gym.registry:
    gym.register("SleepyCartPole-v0", entry_point=SleepyCartPole, max_episode_steps=500)
