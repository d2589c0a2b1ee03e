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


def test_ppo_with_the_cnn_conforms_on_images(conformance):
    report = conformance.check_policy("ppo", {"epochs": 2, "minibatch_size": 32, "cnn_features": 64}, image=True)
    assert "the buffer stores image observations as uint8" in str(report)


def test_ppo_cnn_on_flat_observations_is_refused_with_the_fix(conformance):
    from rlightning_core.testing import ConformanceError

    with pytest.raises(ConformanceError, match=r"encoder: 'cnn' needs channels-first image"):
        conformance.check_policy("ppo", {"encoder": "cnn"})


def test_ppo_conforms_on_every_action_space_it_supports(conformance):
    from rlightning_ppo.spaces import SUPPORTED_ACTION_SPACES

    report = conformance.check_policy_spaces("ppo", {"epochs": 2, "minibatch_size": 32},
                                             action_spaces=SUPPORTED_ACTION_SPACES)
    text = str(report)
    assert "multi_discrete: export_module() gives the actions" in text
    assert "tuple actions" in text and "refused with UnsupportedSpaceError" in text


def test_the_kit_fails_a_policy_that_builds_with_an_undeclared_space(conformance):
    from rlightning_core.testing import ConformanceError

    with pytest.raises(ConformanceError, match=r"builds with the multi_discrete action space .* does not declare"):
        conformance.check_policy_spaces("ppo", {"epochs": 1, "minibatch_size": 32}, action_spaces=["discrete"])
    with pytest.raises(ValueError, match="unknown action space kinds"):
        conformance.check_policy_spaces("ppo", action_spaces=["continuous"])
