"""The ``rsl_rl_ppo`` policy passes rlightning's conformance kit (the ``conformance`` fixture)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

SMALL = {"actor_hidden_dims": [32], "critic_hidden_dims": [32]}


@pytest.mark.parametrize("obs_space, act_space, params", [
    (spaces.Box(-1.0, 1.0, (3,), np.float32), spaces.Box(-2.0, 2.0, (2,), np.float32), {}),
    (spaces.Box(0.0, 1.0, (2, 3), np.float32), spaces.Box(-1.0, 1.0, (1,), np.float32),
     {"obs_normalization": True, "noise_std_type": "log", "schedule": "fixed"}),
], ids=["continuous", "2d-observations-normalized-log-std"])
def test_rsl_rl_ppo_conforms(conformance, obs_space, act_space, params):
    conformance.check_policy("rsl_rl_ppo", {**SMALL, **params}, observation_space=obs_space, action_space=act_space)


def test_rsl_rl_ppo_conforms_on_box_actions_and_refuses_the_others(conformance):
    conformance.check_policy_spaces("rsl_rl_ppo", SMALL, action_spaces=["box"])
