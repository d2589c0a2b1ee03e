"""SAC's pieces: the squashed-Gaussian density, the update-to-data schedule, warm-up, entropy tuning, targets."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from rlightning_sac.networks import squashed_sample
from rlightning_sac.params import SACParams
from rlightning_sac.policy import SACPolicy

from rlightning_core.buffer.base import BufferSpec, Chunk
from rlightning_core.buffer.params import ReplayBufferParams
from rlightning_core.buffer.replay import ReplayBuffer
from rlightning_core.policy.base import PolicyRole
from rlightning_core.policy.schedule import UpdateSchedule, transitions_written

OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = spaces.Box(-2.0, 2.0, (2,), np.float32)


def make(role=PolicyRole.LEARNER, seed=0, **params):
    base = {"hidden_sizes": [16, 16], "batch_size": 8, "learning_starts": 0}
    return SACPolicy(SACParams(**{**base, **params}), observation_space=OBS, action_space=ACT, role=role, seed=seed)


def make_buffer(capacity=1000, num_envs=1, **params):
    spec = BufferSpec(observation_space=OBS, action_space=ACT, num_envs=num_envs, num_steps=8)
    return ReplayBuffer(ReplayBufferParams(capacity=capacity, **params), spec=spec)


def chunk(steps, num_envs=1, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (steps, num_envs, 3)).astype(np.float32)
    data = {"obs": obs, "next_obs": np.roll(obs, -1, axis=0),
            "actions": rng.uniform(-1, 1, (steps, num_envs, 2)).astype(np.float32),
            "rewards": rng.normal(size=(steps, num_envs)).astype(np.float32),
            "terminated": np.zeros((steps, num_envs), bool), "truncated": np.zeros((steps, num_envs), bool)}
    return Chunk(data=data, last_obs=obs[-1])


def test_squashed_log_prob_matches_torch_transformed_distribution():
    from torch.distributions import Normal, TanhTransform, TransformedDistribution

    gen = torch.Generator().manual_seed(0)
    mean, log_std = torch.randn(64, 2, generator=gen), torch.randn(64, 2, generator=gen).clamp(-2, 1)
    noise = torch.randn(64, 2, generator=gen)
    actions, log_prob = squashed_sample(mean, log_std, noise)
    dist = TransformedDistribution(Normal(mean, log_std.exp()), [TanhTransform()])
    u = mean + log_std.exp() * noise
    expected = dist.base_dist.log_prob(u).sum(-1) - TanhTransform().log_abs_det_jacobian(u, actions).sum(-1)
    torch.testing.assert_close(actions, torch.tanh(u))
    torch.testing.assert_close(log_prob, expected, rtol=1e-5, atol=1e-5)
    # far in the tails tanh saturates; the stable form stays finite where log(1 - tanh^2) would be -inf
    _, tail = squashed_sample(torch.full((1, 2), 30.0), torch.zeros(1, 2), torch.zeros(1, 2))
    assert torch.isfinite(tail).all()


def test_transitions_written_counts_through_wraparound():
    buffer, seen = make_buffer(capacity=50), 0
    total = 0
    for steps in (7, 13, 20, 30, 1, 49, 12):
        buffer.add(chunk(steps))
        total += steps
        seen = transitions_written(buffer, seen)
        assert seen == total


def test_schedule_keeps_the_update_to_data_ratio():
    buffer = make_buffer()
    schedule = UpdateSchedule(utd_ratio=0.5, learning_starts=10)
    buffer.add(chunk(8))
    assert schedule.due(buffer) == 0  # 8 written, warm-up of 10
    buffer.add(chunk(8))
    assert schedule.due(buffer) == 3  # floor(0.5 * (16 - 10))
    buffer.add(chunk(5))
    assert schedule.due(buffer) == 2  # floor(0.5 * 11) = 5 in total
    assert schedule.due(buffer) == 0  # no new data, no update
    assert schedule.state_dict() == {"written": 21, "updates": 5}


def test_learn_makes_utd_ratio_updates_per_new_transition():
    policy, buffer = make(utd_ratio=2.0, learning_starts=4), make_buffer()
    buffer.add(chunk(10))
    metrics = policy.learn(buffer)
    assert metrics["stats/updates"] == 12 and metrics["stats/num_updates"] == 12
    assert {"loss/critic", "loss/actor", "loss/ent_coef", "stats/ent_coef", "stats/entropy", "stats/q_mean"} <= set(
        metrics)
    buffer.add(chunk(3, seed=1))
    assert policy.learn(buffer)["stats/updates"] == 6


def test_random_warmup_until_the_rollout_copy_receives_trained_weights():
    learner, rollout = make(), make(PolicyRole.ROLLOUT, seed=1)
    obs = np.random.default_rng(0).uniform(-1, 1, (64, 3)).astype(np.float32)

    def replay(draw):
        """What act(obs) must return, drawing from a copy of the rollout copy's generator."""
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
        mean, log_std = rollout.actor(torch.as_tensor(obs))
    expected = replay(lambda g: torch.tanh(mean + log_std.exp() * torch.randn(mean.shape, generator=g)))
    np.testing.assert_allclose(rollout.act(obs).actions, expected, rtol=1e-6)  # the trained actor's samples
    untrained = make(PolicyRole.ROLLOUT, warmup_actions="policy")
    assert not untrained.actor.trained
    with torch.no_grad():
        mean, log_std = untrained.actor(torch.as_tensor(obs))
    gen = torch.Generator().manual_seed(0)
    gen.set_state(untrained.generator.get_state())
    noise = torch.randn(mean.shape, generator=gen)
    np.testing.assert_allclose(untrained.act(obs).actions, torch.tanh(mean + log_std.exp() * noise).numpy(),
                               rtol=1e-6)


def test_entropy_coefficient_is_tuned_or_fixed():
    buffer = make_buffer()
    buffer.add(chunk(32))
    tuned, fixed = make(), make(auto_ent_coef=False, ent_coef=0.2)
    tuned.learn(buffer)
    fixed.learn(buffer)
    assert tuned.ent_coef().item() != pytest.approx(1.0)
    assert fixed.ent_coef().item() == pytest.approx(0.2)
    assert "ent_coef" not in fixed.optimizers() and "ent_coef" in tuned.optimizers()


def test_target_critics_follow_by_polyak_averaging():
    policy, buffer = make(tau=0.25, utd_ratio=1.0, target_update_interval=1), make_buffer()
    buffer.add(chunk(1))
    before = [t.clone() for t in policy.critic_target.parameters()]
    policy.learn(buffer)  # exactly one update
    for old, target, online in zip(before, policy.critic_target.parameters(), policy.critic.parameters(),
                                   strict=True):
        torch.testing.assert_close(target, 0.75 * old + 0.25 * online)


def test_prioritized_buffer_receives_td_errors():
    policy, buffer = make(), make_buffer(prioritized=True)
    buffer.add(chunk(32))
    before = buffer.sampler.priorities(np.arange(32)).copy()
    policy.learn(buffer)
    assert not np.allclose(buffer.sampler.priorities(np.arange(32)), before)


@pytest.mark.parametrize(("space", "match"), [
    (spaces.Discrete(3), "1-D Box action space"),
    (spaces.Box(-np.inf, np.inf, (2,), np.float32), "bounds must be finite"),
])
def test_unsupported_action_spaces_are_refused(space, match):
    with pytest.raises(TypeError, match=match):
        SACPolicy(SACParams(), observation_space=OBS, action_space=space, role=PolicyRole.LEARNER)


def test_learning_from_a_rollout_buffer_is_refused():
    with pytest.raises(TypeError, match=r"buffer.type: replay"):
        make().learn(object())


def test_bad_params_are_refused():
    with pytest.raises(ValueError, match="log_std_bounds"):
        SACParams(log_std_bounds=[2.0, -20.0])
    with pytest.raises(ValueError, match="hidden_sizes"):
        SACParams(hidden_sizes=[])


def test_a_noise_generator_saved_on_another_device_kind_reseeds_deterministically():
    """A GPU run's checkpoint holds a CUDA generator state (16 bytes); resumed on CPU it seeds from it."""
    same = make(seed=3)
    same.load_extra_state(make(seed=3).extra_state())  # same device kind: the exact state comes back
    assert torch.equal(same.noise_generator.get_state(), make(seed=3).noise_generator.get_state())
    cuda_like = torch.arange(16, dtype=torch.uint8)  # seed and offset, as torch.cuda's generator stores them
    draws = []
    for _ in range(2):
        policy = make(seed=0)
        policy.load_extra_state({"noise_generator": cuda_like})
        draws.append(torch.randn(4, generator=policy.noise_generator))
    assert torch.equal(draws[0], draws[1])
    assert not torch.equal(draws[0], torch.randn(4, generator=make(seed=0).noise_generator))


def test_critics_can_evaluate_only_their_first_members():
    """``members=k`` evaluates the first ``k`` critics alone (TD3's actor loss reads Q_1 only): the same values
    as the full ensemble's first rows, and no gradient reaches the other critics' weights."""
    from rlightning_sac.networks import Critics

    torch.manual_seed(0)
    critics = Critics(3, 4, 2, [16, 8], "relu")
    obs, actions = torch.randn(5, 4), torch.randn(5, 2)
    full = critics(obs, actions)
    first = critics(obs, actions, members=1)
    assert first.shape == (1, 5)
    torch.testing.assert_close(first, full[:1])
    first.sum().backward()
    grads = [layer.weight.grad for layer in [*critics.hidden, critics.out]]
    assert all(g[0].abs().sum() > 0 and g[1:].abs().sum() == 0 for g in grads)
