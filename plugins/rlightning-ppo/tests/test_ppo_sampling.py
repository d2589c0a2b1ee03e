"""PPO's rollout sampling (numpy inverse CDF on CPU) and its cached advantage normalization."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from rlightning_ppo.params import PPOParams
from rlightning_ppo.policy import PPOPolicy, _AdvantageNorm

from rlightning_core.policy.base import PolicyRole


def _policy(n_actions: int, seed: int = 0) -> PPOPolicy:
    obs_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    return PPOPolicy(PPOParams(hidden_sizes=[16]), observation_space=obs_space,
                     action_space=gym.spaces.Discrete(n_actions), role=PolicyRole.ROLLOUT, seed=seed)


def test_categorical_samples_follow_the_softmax_and_log_probs_match_torch() -> None:
    policy = _policy(5)
    with torch.no_grad():  # a skewed head, so the frequencies are informative
        policy.net.pi_head.bias.copy_(torch.tensor([2.0, 1.0, 0.0, -1.0, -3.0]))
    obs = np.zeros((4000, 3), np.float32)
    out = policy.act(obs)
    logits, _ = policy.net(torch.from_numpy(obs))
    ref_logp = torch.log_softmax(logits, -1)
    probs = ref_logp[0].exp().numpy()
    freq = np.bincount(out.actions, minlength=5) / len(out.actions)
    sd = np.sqrt(probs * (1 - probs) / len(out.actions))
    assert np.all(np.abs(freq - probs) < 5 * sd + 1e-4), (freq, probs)
    expected = ref_logp.gather(-1, torch.as_tensor(out.actions).unsqueeze(-1)).squeeze(-1).numpy()
    np.testing.assert_allclose(out.extras["log_prob"], expected, atol=1e-6)
    assert out.actions.dtype == np.int64 and out.extras["log_prob"].dtype == np.float32


def test_categorical_sampling_is_reproducible_and_deterministic_mode_is_argmax() -> None:
    obs = np.random.default_rng(0).standard_normal((64, 3)).astype(np.float32)
    a1 = _policy(4, seed=3).act(obs).actions
    a2 = _policy(4, seed=3).act(obs).actions
    np.testing.assert_array_equal(a1, a2)
    policy = _policy(4, seed=3)
    logits, _ = policy.net(torch.from_numpy(obs))
    np.testing.assert_array_equal(policy.act(obs, deterministic=True).actions, logits.argmax(-1).numpy())


def test_advantage_normalization_is_reused_only_for_the_same_unchanged_view() -> None:
    storage = torch.randn(8, 4)
    norm = _AdvantageNorm()
    first = norm.normalized(storage.reshape(-1))
    assert norm.normalized(storage.reshape(-1)) is first  # a new view of the same, unchanged storage
    torch.testing.assert_close(first, (storage.reshape(-1) - storage.mean()) / (storage.reshape(-1).std() + 1e-8))
    storage[0, 0] += 5.0  # in-place change: the version counter moves, so it is recomputed
    flat = storage.reshape(-1)
    second = norm.normalized(flat)
    assert second is not first
    torch.testing.assert_close(second, (flat - flat.mean()) / (flat.std() + 1e-8))
    other = torch.randn(32)
    assert not torch.equal(norm.normalized(other), second)
