"""TD3's pieces: target policy smoothing, delayed actor and target updates, exploration, warm-up, refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from rlightning_td3.params import TD3Params
from rlightning_td3.policy import TD3Policy

from rlightning_core.buffer.base import BufferSpec, Chunk
from rlightning_core.buffer.params import ReplayBufferParams
from rlightning_core.buffer.replay import ReplayBuffer
from rlightning_core.errors import ConfigError, UnsupportedSpaceError
from rlightning_core.policy.base import PolicyRole

OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = spaces.Box(-2.0, 2.0, (2,), np.float32)


def make(role=PolicyRole.LEARNER, seed=0, **params):
    base = {"hidden_sizes": [16, 16], "batch_size": 8, "learning_starts": 0}
    return TD3Policy(TD3Params(**{**base, **params}), observation_space=OBS, action_space=ACT, role=role, seed=seed)


def make_buffer(capacity=1000, **params):
    spec = BufferSpec(observation_space=OBS, action_space=ACT, num_envs=1, num_steps=8)
    return ReplayBuffer(ReplayBufferParams(capacity=capacity, **params), spec=spec)


def chunk(steps, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (steps, 1, 3)).astype(np.float32)
    data = {"obs": obs, "next_obs": np.roll(obs, -1, axis=0),
            "actions": rng.uniform(-1, 1, (steps, 1, 2)).astype(np.float32),
            "rewards": rng.normal(size=(steps, 1)).astype(np.float32),
            "terminated": np.zeros((steps, 1), bool), "truncated": np.zeros((steps, 1), bool)}
    return Chunk(data=data, last_obs=obs[-1])


def snapshot(module):
    return [t.detach().clone() for t in module.parameters()]


def test_smoothing_noise_is_clipped():
    policy = make(target_noise=10.0, target_noise_clip=0.3)
    next_obs = torch.as_tensor(np.random.default_rng(0).uniform(-1, 1, (512, 3)), dtype=torch.float32)
    with torch.no_grad():
        mu = policy.actor_target(next_obs)
    smoothed = policy.target_actions(next_obs)
    offset = smoothed - mu
    inside = (smoothed > -1.0) & (smoothed < 1.0)  # where the final clamp to the box did not cut
    assert offset[inside].abs().max() <= 0.3 + 1e-6
    assert (offset[inside].abs() > 0.3 - 1e-6).float().mean() > 0.9  # sigma 10: nearly every draw is clipped
    assert smoothed.abs().max() <= 1.0
    no_noise = make(target_noise=0.0)
    torch.testing.assert_close(no_noise.target_actions(next_obs), no_noise.actor_target(next_obs))


def test_actor_and_targets_move_only_every_policy_delay_updates():
    policy, buffer = make(policy_delay=3, tau=0.25), make_buffer()
    buffer.add(chunk(8))
    policy.learn(buffer)  # 8 updates: the actor moved after updates 3 and 6
    for k in range(1, 7):
        actor, critic = snapshot(policy.actor), snapshot(policy.critic)
        targets = snapshot(policy.actor_target), snapshot(policy.critic_target)
        buffer.add(chunk(1, seed=k))
        metrics = policy.learn(buffer)  # exactly one update, number 8 + k
        due = (8 + k) % 3 == 0
        assert metrics["stats/updates"] == 1 and metrics["stats/actor_updates"] == float(due)
        assert ("loss/actor" in metrics) == due
        assert not all(torch.equal(a, b) for a, b in zip(critic, policy.critic.parameters(), strict=True))
        moved = not all(torch.equal(a, b) for a, b in zip(actor, policy.actor.parameters(), strict=True))
        assert moved == due
        for before, target, online in ((targets[0], policy.actor_target, policy.actor),
                                       (targets[1], policy.critic_target, policy.critic)):
            for old, t, o in zip(before, target.parameters(), online.parameters(), strict=True):
                if due:  # targets move by tau towards the updated networks
                    torch.testing.assert_close(t, 0.75 * old + 0.25 * o)
                else:
                    assert torch.equal(t, old)


def test_learn_counts_updates_by_the_utd_ratio():
    policy, buffer = make(utd_ratio=2.0, learning_starts=4), make_buffer()
    buffer.add(chunk(10))
    metrics = policy.learn(buffer)
    assert metrics["stats/updates"] == 12 and metrics["stats/actor_updates"] == 6
    assert metrics["stats/num_updates"] == 12 and {"loss/critic", "loss/actor", "stats/q_mean"} <= set(metrics)


def test_random_warmup_then_clipped_exploration_noise():
    learner, rollout = make(), make(PolicyRole.ROLLOUT, seed=1, action_noise=0.5)
    obs = np.random.default_rng(0).uniform(-1, 1, (64, 3)).astype(np.float32)

    def replay(draw):
        gen = torch.Generator().manual_seed(0)
        gen.set_state(rollout.generator.get_state())
        return draw(gen).numpy()

    expected = replay(lambda g: torch.rand((64, 2), generator=g) * 2.0 - 1.0)
    warm = rollout.act(obs)
    np.testing.assert_array_equal(warm.actions, expected)  # uniform over [-1, 1], whatever the actor says
    np.testing.assert_allclose(warm.env_actions, 2.0 * warm.actions, rtol=1e-6)  # rescaled to [-2, 2]
    buffer = make_buffer()
    buffer.add(chunk(16))
    learner.learn(buffer)
    rollout.set_weights(learner.get_weights())
    with torch.no_grad():
        mu = rollout.actor(torch.as_tensor(obs))
    expected = replay(lambda g: (mu + 0.5 * torch.randn(mu.shape, generator=g)).clamp(-1, 1))
    np.testing.assert_allclose(rollout.act(obs).actions, expected, rtol=1e-6)
    np.testing.assert_allclose(rollout.act(obs, deterministic=True).actions, mu.numpy(), rtol=1e-6)
    exported = rollout.export_module()(torch.as_tensor(obs))
    np.testing.assert_allclose(exported.detach().numpy(), rollout.act(obs, deterministic=True).env_actions,
                               rtol=1e-6)


@pytest.mark.parametrize(("space", "match"), [
    (spaces.Discrete(3), r"policy 'td3' does not support the action space Discrete\(3\).*1-D Box"),
    (spaces.MultiBinary(2), r"policy 'td3' does not support the action space MultiBinary"),
    (spaces.Box(-np.inf, np.inf, (2,), np.float32), "bounds must be finite"),
])
def test_unsupported_action_spaces_are_refused(space, match):
    with pytest.raises(UnsupportedSpaceError, match=match) as info:
        TD3Policy(TD3Params(), observation_space=OBS, action_space=space, role=PolicyRole.LEARNER)
    assert isinstance(info.value, ConfigError)  # the CLI prints it as a config problem, without a traceback
    assert info.value.problems[0].startswith("policy.type: policy 'td3'")


def test_bad_params_are_refused():
    with pytest.raises(ValueError, match="hidden_sizes"):
        TD3Params(hidden_sizes=[])
    with pytest.raises(ValueError, match="must be >= 1"):
        TD3Params(policy_delay=0)
    with pytest.raises(TypeError, match=r"buffer\.type: replay"):
        make().learn(object())
