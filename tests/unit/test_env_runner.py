"""The env-runner records transitions correctly: truncation bootstraps from the true final observation."""

from __future__ import annotations

import numpy as np
import pytest

from rlightning_core.env.runner import EnvRunner
from rlightning_core.policy.base import BasePolicy, PolicyOutput, PolicyRole


class SumValuePolicy(BasePolicy):
    """Acts 0/1 alternately; its value of an observation is the sum of its entries (easy to check)."""

    extras_spec = {"value": ((), np.float32)}

    def __init__(self, observation_space, action_space):
        super().__init__(None, observation_space=observation_space, action_space=action_space,
                         role=PolicyRole.ROLLOUT)
        self.t = 0

    def act(self, obs, *, deterministic=False):
        self.t += 1
        actions = np.full(len(obs), self.t % 2, dtype=np.int64)
        return PolicyOutput(actions=actions, extras={"value": self.value(obs)})

    def value(self, obs):
        return np.asarray(obs, dtype=np.float32).sum(axis=-1)

    def learn(self, buffer, *, progress=0.0):
        return {}

    def modules(self):
        return {}


@pytest.fixture
def worker():
    pytest.importorskip("rlightning_gymnasium")
    from rlightning_gymnasium.params import GymnasiumParams
    from rlightning_gymnasium.worker import GymnasiumWorker

    w = GymnasiumWorker(GymnasiumParams(id="CartPole-v1", max_episode_steps=5), num_envs=3, seed=11)
    yield w
    w.close()


def test_truncated_steps_bootstrap_from_the_final_observation(worker):
    policy = SumValuePolicy(worker.observation_space, worker.action_space)
    runner = EnvRunner(worker, policy, needs_next_obs=True)
    runner.reset(seed=3)
    chunk, stats = runner.collect(12)
    d = chunk.data
    assert d["obs"].shape == (12, 3, 4) and d["actions"].shape == (12, 3)
    trunc, term = d["truncated"], d["terminated"]
    assert trunc.any(), "episodes of 5 steps must be truncated within 12 steps"
    # where truncated: bootstrap value == V(true final obs) == next_obs row (the final observation)
    np.testing.assert_allclose(d["bootstrap_values"][trunc], d["next_obs"][trunc].sum(-1), rtol=1e-6)
    assert np.all(d["bootstrap_values"][~trunc] == 0)
    # the final observation is not the reset observation the policy acts on next
    t, i = np.argwhere(trunc)[0]
    if t + 1 < 12:
        assert not np.allclose(d["next_obs"][t, i], d["obs"][t + 1, i])
    # where the episode continues, next_obs is the next step's obs
    cont = ~(trunc | term)
    cont[-1] = False
    np.testing.assert_array_equal(d["next_obs"][:-1][cont[:-1]], d["obs"][1:][cont[:-1]])
    np.testing.assert_allclose(chunk.last_values, chunk.last_obs.sum(-1), rtol=1e-6)
    assert stats.steps == 36 and len(stats.episodes) == int((trunc | term).sum())
    assert all(ep.length <= 5 for ep in stats.episodes)


def test_runner_without_value_function_skips_bootstrap(worker):
    class NoValue(SumValuePolicy):
        value = BasePolicy.value

        def act(self, obs, *, deterministic=False):
            return PolicyOutput(actions=np.zeros(len(obs), dtype=np.int64))

    runner = EnvRunner(worker, NoValue(worker.observation_space, worker.action_space))
    chunk, _ = runner.collect(4)
    assert "bootstrap_values" not in chunk.data and chunk.last_values is None
    assert "next_obs" not in chunk.data
