"""PPO's MultiDiscrete, MultiBinary and bounded Box action distributions, against hand computations."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from rlightning_ppo.params import PPOParams
from rlightning_ppo.policy import PPOPolicy

from rlightning_core.errors import ConfigError, UnsupportedSpaceError
from rlightning_core.policy.base import PolicyRole
from rlightning_core.testing.space_envs import BoxTargetEnv, standard_action_spaces

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
SPACES = standard_action_spaces()


def _policy(action_space, role=PolicyRole.ROLLOUT, seed: int = 0, **params) -> PPOPolicy:
    return PPOPolicy(PPOParams(hidden_sizes=[16], **params), observation_space=OBS, action_space=action_space,
                     role=role, seed=seed)


def test_multibinary_log_prob_and_entropy_match_a_hand_computation() -> None:
    policy = _policy(gym.spaces.MultiBinary(3), PolicyRole.LEARNER)
    with torch.no_grad():  # logits (2, 0, -1) for every observation: P(bit = 1) = sigmoid(logit)
        policy.net.pi_head.weight.zero_()
        policy.net.pi_head.bias.copy_(torch.tensor([2.0, 0.0, -1.0]))
    p1 = [1 / (1 + math.exp(-x)) for x in (2.0, 0.0, -1.0)]
    obs = np.zeros((2, 3), np.float32)
    actions = torch.tensor([[1, 0, 0], [0, 1, 1]])
    logp, entropy_fn, _ = policy._evaluate(torch.from_numpy(obs), actions)
    expected = [sum(math.log(p if a else 1 - p) for p, a in zip(p1, row, strict=True)) for row in actions.tolist()]
    np.testing.assert_allclose(logp.detach().numpy(), expected, rtol=1e-6)
    entropy = sum(-(p * math.log(p) + (1 - p) * math.log(1 - p)) for p in p1)
    assert entropy_fn().item() == pytest.approx(entropy, rel=1e-6)
    out = policy.act(np.zeros((4000, 3), np.float32))  # sampled bits follow the probabilities
    assert out.actions.dtype == np.int64 and set(np.unique(out.actions)) <= {0, 1}
    np.testing.assert_allclose(out.actions.mean(0), p1, atol=0.03)
    det = policy.act(obs, deterministic=True)
    np.testing.assert_array_equal(det.actions, [[1, 0, 0], [1, 0, 0]])  # logit 0 is not above 1/2


def test_multidiscrete_log_prob_is_the_sum_over_dimensions_and_start_reaches_the_env() -> None:
    space = SPACES["multi_discrete"]  # MultiDiscrete([3, 4], start=[0, 1])
    policy = _policy(space, PolicyRole.LEARNER)
    obs = np.random.default_rng(0).uniform(-1, 1, (500, 3)).astype(np.float32)
    out = policy.act(obs)
    assert out.actions.shape == (500, 2) and out.actions.dtype == np.int64
    assert out.actions[:, 0].max() <= 2 and out.actions[:, 1].max() <= 3 and out.actions.min() >= 0
    np.testing.assert_array_equal(out.env_actions, out.actions + np.array([0, 1]))
    assert all(space.contains(a) for a in out.env_actions)
    logits, _ = policy.net(torch.from_numpy(obs))
    a, b = torch.log_softmax(logits[:, :3], -1), torch.log_softmax(logits[:, 3:], -1)
    idx = torch.from_numpy(out.actions)
    expected = a.gather(-1, idx[:, :1]).squeeze(-1) + b.gather(-1, idx[:, 1:]).squeeze(-1)
    np.testing.assert_allclose(out.extras["log_prob"], expected.detach().numpy(), atol=1e-5)
    logp, entropy_fn, _ = policy._evaluate(torch.from_numpy(obs), idx)
    np.testing.assert_allclose(logp.detach().numpy(), out.extras["log_prob"], atol=1e-5)
    ent = (-(a.exp() * a).sum(-1) - (b.exp() * b).sum(-1)).mean()
    assert entropy_fn().item() == pytest.approx(ent.item(), rel=1e-5)
    det = policy.act(obs, deterministic=True)
    np.testing.assert_array_equal(det.env_actions, torch.stack([a.argmax(-1), b.argmax(-1) + 1], -1).numpy())


def test_learn_on_stored_multidiscrete_actions_reproduces_the_rollout_log_probs() -> None:
    """Before the first update the learner's log-probs of the buffer's actions equal the rollout copy's: the first
    (and only) minibatch has ratio 1, so approx-KL 0 and no clipping."""
    from rlightning_core.buffer.base import BufferSpec
    from rlightning_core.buffer.rollout import RolloutBuffer, RolloutBufferParams
    from rlightning_core.env.runner import EnvRunner
    from rlightning_core.testing.doubles import SpaceEnv

    space = SPACES["multi_discrete"]
    learner = _policy(space, PolicyRole.LEARNER, epochs=1, minibatch_size=64)
    rollout = _policy(space, PolicyRole.ROLLOUT, seed=5)
    rollout.set_weights(learner.get_weights())
    env = SpaceEnv(OBS, space, num_envs=4, seed=0)
    buffer = RolloutBuffer(RolloutBufferParams(), spec=BufferSpec(
        observation_space=OBS, action_space=space, num_envs=4, num_steps=16,
        extras_spec=dict(learner.extras_spec), seed=0))
    runner = EnvRunner(env, rollout)
    runner.reset(seed=0)
    chunk, _ = runner.collect(16)
    buffer.add(chunk)
    stored = buffer["actions"]
    assert stored.dtype == torch.int64 and stored.shape == (16, 4, 2)
    assert stored[..., 1].max() <= 3  # indices, not start-shifted env actions
    obs = buffer["obs"].reshape(64, -1)
    logp, _, _ = learner._evaluate(obs, stored.reshape(64, 2))
    np.testing.assert_allclose(logp.detach().numpy(), buffer["log_prob"].reshape(64).numpy(), atol=1e-5)
    metrics = learner.learn(buffer)
    assert abs(metrics["stats/approx_kl"]) < 1e-6 and metrics["stats/clip_fraction"] == 0.0


def test_box_actions_reach_the_env_clipped_and_are_stored_unclipped() -> None:
    """A wide Gaussian (std e^1) samples far outside the box: the env gets the sample clipped to the bounds, the
    buffer the sample itself, whose log-prob is the exact Gaussian density (no correction for the clipping)."""
    env = BoxTargetEnv()  # strict: raises on an action outside its box
    policy = PPOPolicy(PPOParams(hidden_sizes=[16], log_std_init=1.0), observation_space=env.observation_space,
                       action_space=env.action_space, role=PolicyRole.ROLLOUT, seed=0)
    obs, _ = env.reset(seed=0)
    outside = 0
    for _ in range(64):
        out = policy.act(obs[None])
        env_action = out.env_actions[0]
        assert np.all(env_action >= env.action_space.low) and np.all(env_action <= env.action_space.high)
        np.testing.assert_array_equal(env_action, np.clip(out.actions[0], env.action_space.low, env.action_space.high))
        mean, _ = policy.net(torch.from_numpy(obs[None]))
        normal = torch.distributions.Normal(mean, policy.net.log_std.exp())
        expected = normal.log_prob(torch.from_numpy(out.actions)).sum(-1)
        np.testing.assert_allclose(out.extras["log_prob"], expected.numpy(), rtol=1e-5)
        outside += int(not env.action_space.contains(out.actions[0]))
        obs, *_ = env.step(env_action)
    assert outside > 32  # most samples left the box, and the env never saw one outside it
    det = policy.act(obs[None], deterministic=True)
    with torch.no_grad():
        exported = policy.export_module()(torch.from_numpy(obs[None])).numpy()
    # act runs the forward pass in numpy (numpy_act), the export in torch: equal to float32 rounding
    np.testing.assert_allclose(exported, det.env_actions, rtol=1e-5, atol=1e-7)


def test_unsupported_action_spaces_are_config_errors_naming_the_space_and_plugin() -> None:
    with pytest.raises(UnsupportedSpaceError, match=r"policy\.type: policy 'ppo' does not support the action space "
                                                    r"Tuple") as info:
        _policy(SPACES["tuple"])
    assert isinstance(info.value, ConfigError) and isinstance(info.value, TypeError)
    with pytest.raises(UnsupportedSpaceError, match=r"MultiDiscrete\(\[\[2 2\]"):
        _policy(gym.spaces.MultiDiscrete([[2, 2], [2, 2]]))
