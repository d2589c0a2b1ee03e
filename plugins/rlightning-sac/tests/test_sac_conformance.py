"""The ``sac`` policy passes rlightning's conformance kit (``conformance`` comes from rlightning's pytest plugin)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from rlightning_core.testing.space_envs import continuous_control_cases

CASES = continuous_control_cases()
SMALL = {"hidden_sizes": [32, 32], "batch_size": 32, "learning_starts": 32}


@pytest.mark.parametrize("obs_space, act_space", list(CASES.values()), ids=list(CASES))
def test_sac_conforms(conformance, obs_space, act_space):
    conformance.check_policy("sac", SMALL, observation_space=obs_space, action_space=act_space,
                             learn_iterations=2)


@pytest.mark.parametrize("extra", [
    {"auto_ent_coef": False, "ent_coef": 0.1, "warmup_actions": "policy"},
    {"utd_ratio": 0.5, "target_update_interval": 2, "max_grad_norm": 1.0},
    {"precision": "bf16"},
], ids=["fixed-alpha", "utd-and-clipping", "bf16"])
def test_sac_variants_conform(conformance, extra):
    conformance.check_policy("sac", {**SMALL, **extra}, observation_space=spaces.Box(-1.0, 1.0, (3,), np.float32),
                             action_space=spaces.Box(-2.0, 2.0, (1,), np.float32), learn_iterations=2)


def test_sac_conforms_on_box_actions_and_refuses_the_others(conformance):
    conformance.check_policy_spaces("sac", SMALL, action_spaces=["box"], learn_iterations=2)
