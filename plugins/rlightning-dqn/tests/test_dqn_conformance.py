"""The ``dqn`` policy passes rlightning's conformance kit (``conformance`` comes from rlightning's pytest plugin)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

SMALL = {"hidden_sizes": [32, 32], "batch_size": 32, "learning_starts": 32, "utd_ratio": 0.5}


@pytest.mark.parametrize("obs_space, act_space", [
    (spaces.Box(-1.0, 1.0, (4,), np.float32), spaces.Discrete(2)),
    (spaces.Box(-1.0, 1.0, (6,), np.float32), spaces.Discrete(5, start=-2)),
    (spaces.Box(0.0, 1.0, (2, 3), np.float32), spaces.Discrete(3)),
], ids=["cartpole-like", "shifted-actions", "2d-observations"])
def test_dqn_conforms(conformance, obs_space, act_space):
    conformance.check_policy("dqn", SMALL, observation_space=obs_space, action_space=act_space, learn_iterations=2)


@pytest.mark.parametrize("extra", [
    {"double_dqn": False, "loss": "mse", "max_grad_norm": None},
    {"tau": 0.01, "target_update_interval": 1},
], ids=["vanilla-mse", "polyak-target"])
def test_dqn_variants_conform(conformance, extra):
    conformance.check_policy("dqn", {**SMALL, **extra}, learn_iterations=2)


def test_dqn_with_the_cnn_conforms_on_images(conformance):
    report = conformance.check_policy("dqn", {**SMALL, "cnn_features": 64}, image=True, learn_iterations=2)
    assert "the buffer stores image observations as uint8" in str(report)


def test_dqn_mlp_encoder_can_be_forced_on_images(conformance):
    conformance.check_policy("dqn", {**SMALL, "encoder": "mlp"}, image=True, learn_iterations=2)


def test_dqn_conforms_on_discrete_actions_and_refuses_the_others(conformance):
    conformance.check_policy_spaces("dqn", SMALL, action_spaces=["discrete"], learn_iterations=2)
