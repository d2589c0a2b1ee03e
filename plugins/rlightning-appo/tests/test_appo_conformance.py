"""The ``appo`` policy passes rlightning's conformance kit (``conformance`` comes from rlightning's pytest plugin)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces


@pytest.mark.parametrize("obs_space, act_space", [
    (spaces.Box(-1.0, 1.0, (4,), np.float32), spaces.Discrete(3)),
    (spaces.Box(-1.0, 1.0, (3,), np.float32), spaces.Box(-2.0, 2.0, (2,), np.float32)),
], ids=["discrete", "continuous"])
@pytest.mark.parametrize("params", [{}, {"vtrace": False, "clip": False, "epochs": 2, "minibatch_size": 16}],
                         ids=["vtrace-clip", "plain-pg"])
def test_appo_conforms(conformance, obs_space, act_space, params):
    conformance.check_policy("appo", params, observation_space=obs_space, action_space=act_space)


def test_appo_with_the_cnn_conforms_on_images(conformance):
    conformance.check_policy("appo", {"minibatch_size": 32, "cnn_features": 64}, image=True)


def test_appo_conforms_on_every_action_space_of_ppo(conformance):
    from rlightning_ppo.spaces import SUPPORTED_ACTION_SPACES

    conformance.check_policy_spaces("appo", {"minibatch_size": 32}, action_spaces=SUPPORTED_ACTION_SPACES)
