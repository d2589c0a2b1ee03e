"""The ``recurrent_ppo`` policy passes rlightning's conformance kit (``conformance`` comes from rlightning's pytest
plugin)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces


@pytest.mark.parametrize("obs_space, act_space, params", [
    (spaces.Box(-1.0, 1.0, (4,), np.float32), spaces.Discrete(3), {"seq_len": 8}),
    (spaces.Box(-1.0, 1.0, (3,), np.float32), spaces.Box(-2.0, 2.0, (2,), np.float32),
     {"core": "gru", "seq_len": 4, "head_sizes": [16]}),
    (spaces.Box(0.0, 1.0, (2, 3), np.float32), spaces.Discrete(2),
     {"shared_core": False, "hidden_sizes": [], "seq_len": 16}),
], ids=["lstm-discrete", "gru-continuous", "separate-cores-2d"])
def test_recurrent_ppo_conforms(conformance, obs_space, act_space, params):
    conformance.check_policy("recurrent_ppo", {"epochs": 2, "minibatch_size": 32, "hidden_size": 16, **params},
                             observation_space=obs_space, action_space=act_space)


def test_cnn_encoder_is_refused_naming_the_key(conformance):
    from rlightning_core.testing import ConformanceError

    with pytest.raises(ConformanceError, match=r"policy.params.encoder: recurrent_ppo has the MLP encoder only"):
        conformance.check_policy("recurrent_ppo", {"encoder": "cnn"})


def test_minibatch_not_a_multiple_of_seq_len_is_refused(conformance):
    from rlightning_core.testing import ConformanceError

    with pytest.raises(ConformanceError, match=r"minibatch_size \(40\) must be a multiple of .*seq_len \(16\)"):
        conformance.check_policy("recurrent_ppo", {"minibatch_size": 40, "seq_len": 16})


def test_export_is_refused_with_the_reason():
    from rlightning_recurrent_ppo.params import RecurrentPPOParams
    from rlightning_recurrent_ppo.policy import RecurrentPPOPolicy

    from rlightning_core.errors import UserError

    policy = RecurrentPPOPolicy(RecurrentPPOParams(), observation_space=spaces.Box(-1.0, 1.0, (2,), np.float32),
                                action_space=spaces.Discrete(2))
    with pytest.raises(UserError, match="cannot be exported: its actions depend on a per-env core state"):
        policy.export_module()


def test_recurrent_ppo_conforms_on_box_actions_and_refuses_the_others(conformance):
    """Discrete with a start, MultiDiscrete and MultiBinary are refused (its heads are categorical / Gaussian)."""
    conformance.check_policy_spaces("recurrent_ppo", {"epochs": 2, "minibatch_size": 32, "hidden_size": 16},
                                    action_spaces=["box"])
