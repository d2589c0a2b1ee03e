"""The ``ppo`` policy passes rlightning's conformance kit (``conformance`` comes from rlightning's pytest plugin)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces


@pytest.mark.parametrize("obs_space, act_space", [
    (spaces.Box(-1.0, 1.0, (4,), np.float32), spaces.Discrete(3)),
    (spaces.Box(-1.0, 1.0, (3,), np.float32), spaces.Box(-2.0, 2.0, (2,), np.float32)),
    (spaces.Box(0.0, 1.0, (2, 3), np.float32), spaces.Discrete(2)),
], ids=["discrete", "continuous", "2d-observations"])
def test_ppo_conforms(conformance, obs_space, act_space):
    conformance.check_policy("ppo", {"epochs": 2, "minibatch_size": 32}, observation_space=obs_space,
                             action_space=act_space)


def test_ppo_shared_network_conforms(conformance):
    conformance.check_policy("ppo", {"shared_network": True, "clip_value": 0.2, "anneal_lr": True})
