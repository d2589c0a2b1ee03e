"""PPO's torch-free rollout copy: the torch policy's forward pass, log-probs and sampling, in numpy."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlightning_ppo.networks import gaussian_log_prob
from rlightning_ppo.params import PPOParams
from rlightning_ppo.policy import PPOPolicy
from rlightning_ppo.rollout import NumpyPPORollout, make_ppo_rollout

from rlightning_core.policy.base import PolicyRole

DISCRETE = (gym.spaces.Box(-5.0, 5.0, (3, 2), np.float32), gym.spaces.Discrete(4))
CONTINUOUS = (gym.spaces.Box(-5.0, 5.0, (5,), np.float32), gym.spaces.Box(-1.0, 2.0, (2,), np.float32))


def _pair(params: PPOParams, spaces: tuple, seed: int = 3) -> tuple[PPOPolicy, NumpyPPORollout]:
    obs_space, act_space = spaces
    learner = PPOPolicy(params, observation_space=obs_space, action_space=act_space, role=PolicyRole.LEARNER,
                        seed=seed)
    with torch.no_grad():  # move every parameter off its initial value (zero biases, the 0.01-gain head)
        gen = torch.Generator().manual_seed(seed)
        for p in learner.net.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen))
    copy = make_ppo_rollout(params, observation_space=obs_space, action_space=act_space, seed=seed)
    assert isinstance(copy, NumpyPPORollout)
    copy.set_weights(learner.get_weights(), version=7)
    return learner, copy


LAYOUTS = [
    pytest.param(PPOParams(), DISCRETE, id="fused-64-64-discrete"),
    pytest.param(PPOParams(hidden_sizes=[32, 16, 8], activation="elu"), CONTINUOUS, id="fused-3-layers-elu-gauss"),
    pytest.param(PPOParams(shared_network=True, activation="relu"), DISCRETE, id="shared-relu"),
    pytest.param(PPOParams(hidden_sizes=[], activation="silu"), CONTINUOUS, id="no-hidden-gauss"),
    pytest.param(PPOParams(hidden_sizes=[24], activation="silu"), DISCRETE, id="one-layer-silu"),
]


@pytest.mark.parametrize(("params", "spaces"), LAYOUTS)
def test_the_numpy_copy_computes_the_torch_policy_outputs(params: PPOParams, spaces: tuple) -> None:
    learner, copy = _pair(params, spaces)
    assert copy.weight_version == 7
    weights = learner.get_weights()
    assert copy.get_weights().keys() == weights.keys()
    assert all(np.array_equal(copy.get_weights()[k], weights[k]) for k in weights)  # bit for bit
    obs = np.random.default_rng(0).normal(size=(6, *spaces[0].shape)).astype(np.float32)
    with torch.no_grad():
        out, value = learner.net(torch.from_numpy(obs.reshape(6, -1)))
    ref = learner.act(obs, deterministic=True)
    mine = copy.act(obs, deterministic=True)
    np.testing.assert_allclose(mine.extras["value"], value.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(copy.value(obs), value.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mine.extras["log_prob"], ref.extras["log_prob"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mine.actions, ref.actions, rtol=1e-5, atol=1e-5)
    assert mine.actions.dtype == ref.actions.dtype
    assert mine.extras["log_prob"].dtype == mine.extras["value"].dtype == np.float32
    # sampled actions: the stored log-prob is the learner's log-prob of that action
    sampled = copy.act(obs)
    acts = torch.from_numpy(sampled.actions)
    if copy.discrete:
        ref_logp = torch.log_softmax(out, -1).gather(-1, acts.unsqueeze(-1)).squeeze(-1)
    else:
        ref_logp = gaussian_log_prob(acts, out, learner.net.log_std)
        low, high = spaces[1].low, spaces[1].high
        assert np.array_equal(sampled.env_actions, np.clip(sampled.actions, low, high))
    np.testing.assert_allclose(sampled.extras["log_prob"], ref_logp.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_categorical_samples_follow_the_softmax_and_are_reproducible() -> None:
    _, copy = _pair(PPOParams(hidden_sizes=[8]), DISCRETE)
    weights = copy.get_weights()
    weights["net.pi_head.weight"][:] = 0.0
    weights["net.pi_head.bias"][:] = [2.0, 0.5, 0.0, -2.0]  # a skewed distribution, the same for every obs
    copy.set_weights(weights)
    obs = np.zeros((20000, 3, 2), np.float32)
    actions = copy.act(obs).actions
    probs = np.exp([2.0, 0.5, 0.0, -2.0]) / np.exp([2.0, 0.5, 0.0, -2.0]).sum()
    freq = np.bincount(actions, minlength=4) / len(actions)
    assert np.all(np.abs(freq - probs) < 5 * np.sqrt(probs * (1 - probs) / len(actions)))
    twin = make_ppo_rollout(PPOParams(hidden_sizes=[8]), observation_space=DISCRETE[0], action_space=DISCRETE[1],
                            seed=3)
    twin.set_weights(weights)
    assert np.array_equal(twin.act(obs).actions, actions)  # same seed, same draws


def test_it_refuses_to_act_without_weights_and_rejects_weights_of_another_policy() -> None:
    params = PPOParams(hidden_sizes=[8])
    copy = make_ppo_rollout(params, observation_space=DISCRETE[0], action_space=DISCRETE[1], seed=0)
    with pytest.raises(RuntimeError, match="before the learner's weights arrived"):
        copy.act(np.zeros((1, 3, 2), np.float32))
    other = PPOPolicy(PPOParams(hidden_sizes=[16]), observation_space=DISCRETE[0], action_space=DISCRETE[1],
                      role=PolicyRole.ROLLOUT)
    with pytest.raises(ValueError, match=r"has shape .*expected"):
        copy.set_weights(other.get_weights())
    weights = other.get_weights()
    del weights["net.v_head.bias"]
    with pytest.raises(ValueError, match=r"missing.*v_head\.bias"):
        copy.set_weights(weights)
    assert copy.modules() == {}
    with pytest.raises(RuntimeError, match=r"rollout copy"):
        copy.learn(None)


def test_gelu_has_no_numpy_copy() -> None:
    assert make_ppo_rollout(PPOParams(activation="gelu"), observation_space=DISCRETE[0],
                            action_space=DISCRETE[1]) is None


def test_the_rollout_module_does_not_import_torch() -> None:
    code = ("import sys; from rlightning_ppo.plugin import make_ppo_rollout; from rlightning_ppo.params import "
            "PPOParams; import gymnasium as gym; c = make_ppo_rollout(PPOParams(), observation_space="
            "gym.spaces.Box(-1, 1, (4,)), action_space=gym.spaces.Discrete(2)); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"
