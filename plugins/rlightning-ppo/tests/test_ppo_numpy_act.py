"""``numpy_act``: rollouts act through numpy on views of the parameters, as torch would, and follow every update."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlightning_ppo.params import PPOParams
from rlightning_ppo.policy import PPOPolicy

from rlightning_core.policy.base import PolicyRole
from rlightning_core.testing.space_envs import standard_action_spaces

OBS = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
SPACES = {k: v for k, v in standard_action_spaces().items() if k != "tuple"}  # ppo refuses Tuple


def _pair(action_space, role=PolicyRole.ROLLOUT, **params) -> tuple[PPOPolicy, PPOPolicy]:
    """The same policy (same seed: same weights and generator) acting through numpy and through torch."""
    return tuple(PPOPolicy(PPOParams(hidden_sizes=[32, 32], numpy_act=flag, **params), observation_space=OBS,
                           action_space=action_space, role=role, seed=4) for flag in (True, False))


@pytest.mark.parametrize("activation", ["tanh", "relu", "elu", "silu"])
@pytest.mark.parametrize("name", sorted(SPACES))
def test_numpy_act_samples_what_torch_samples(name, activation):
    fast, slow = _pair(SPACES[name], log_std_init=0.5, activation=activation)
    assert fast._np_forward is not None and slow._np_forward is None
    obs = np.random.default_rng(0).uniform(-1, 1, (6, 5)).astype(np.float32)
    for deterministic in (False, True, False):
        a, b = fast.act(obs, deterministic=deterministic), slow.act(obs, deterministic=deterministic)
        # the same draws from the same generator; the forward pass agrees to float32 rounding
        if a.actions.dtype.kind == "f":
            np.testing.assert_allclose(a.actions, b.actions, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(a.env_actions, b.env_actions, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(a.actions, b.actions)
        for key in ("log_prob", "value"):
            assert a.extras[key].dtype == np.float32 and a.extras[key].shape == (6,)
            np.testing.assert_allclose(a.extras[key], b.extras[key], rtol=1e-5, atol=1e-6)
    assert torch.equal(fast.generator.get_state(), slow.generator.get_state())


def test_numpy_act_sees_optimizer_steps_and_weights_loaded_or_moved():
    box = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
    learner, torch_copy = _pair(box, role=PolicyRole.LEARNER)
    obs = np.random.default_rng(1).uniform(-1, 1, (3, 5)).astype(np.float32)

    def agree() -> None:
        a, b = learner.act(obs, deterministic=True), torch_copy.act(obs, deterministic=True)
        np.testing.assert_allclose(a.actions, b.actions, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(a.extras["value"], b.extras["value"], rtol=1e-5, atol=1e-6)

    before = learner.act(obs, deterministic=True).actions.copy()
    with torch.no_grad():  # an in-place update (as an optimizer step makes), then the copy takes the weights
        for p in learner.net.parameters():
            p.add_(0.1)
    torch_copy.net.load_state_dict(learner.net.state_dict())
    agree()
    assert not np.allclose(before, learner.act(obs, deterministic=True).actions)
    with torch.no_grad():  # parameters moved to new storage (``.data =``): the numpy views are retaken
        for p in learner.net.parameters():
            p.data = p.data.clone() * 0.5
        for p in torch_copy.net.parameters():
            p.mul_(0.5)
    agree()


@pytest.mark.parametrize(("params", "why"), [({"activation": "gelu"}, "gelu"), ({"shared_network": True}, "shared"),
                                             ({"numpy_act": False}, "off")])
def test_numpy_act_falls_back_to_torch_where_it_cannot_run(params, why):
    policy = PPOPolicy(PPOParams(hidden_sizes=[16], **params), observation_space=OBS,
                       action_space=gym.spaces.Discrete(3), role=PolicyRole.ROLLOUT, seed=0)
    assert policy._np_forward is None, why
    out = policy.act(np.zeros((2, 5), np.float32))
    assert out.actions.shape == (2,) and out.extras["log_prob"].dtype == np.float32
