"""DQN's pieces: the (double) n-step target, epsilon schedule, target network, prioritized replay."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from rlightning_dqn.params import DQNParams
from rlightning_dqn.policy import DQNPolicy, epsilon_at
from torch.nn import functional as F

from rlightning_core.buffer.base import BufferSpec, Chunk
from rlightning_core.buffer.params import ReplayBufferParams
from rlightning_core.buffer.replay import ReplayBuffer
from rlightning_core.policy.base import PolicyRole

OBS = spaces.Box(-1.0, 1.0, (4,), np.float32)
ACT = spaces.Discrete(3)


def make(role=PolicyRole.LEARNER, seed=0, **params):
    base = {"hidden_sizes": [16, 16], "batch_size": 8, "learning_starts": 0, "utd_ratio": 1.0}
    return DQNPolicy(DQNParams(**{**base, **params}), observation_space=OBS, action_space=ACT, role=role, seed=seed)


def make_buffer(capacity=1000, **params):
    spec = BufferSpec(observation_space=OBS, action_space=ACT, num_envs=2, num_steps=8)
    return ReplayBuffer(ReplayBufferParams(capacity=capacity, **params), spec=spec)


def chunk(steps, seed=0):
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (steps, 2, 4)).astype(np.float32)
    data = {"obs": obs, "next_obs": np.roll(obs, -1, axis=0), "actions": rng.integers(0, 3, (steps, 2)),
            "rewards": rng.normal(size=(steps, 2)).astype(np.float32),
            "terminated": rng.random((steps, 2)) < 0.1, "truncated": np.zeros((steps, 2), bool)}
    return Chunk(data=data, last_obs=obs[-1])


@pytest.mark.parametrize("double", [True, False])
def test_loss_uses_the_n_step_batch_discount_and_the_double_dqn_target(double):
    buffer = make_buffer(n_step=3, gamma=0.9)
    buffer.add(chunk(20))
    written = len(buffer)  # 40 steps minus the n-step windows still open at the chunk's end
    policy = make(double_dqn=double, loss="mse", batch_size=16, utd_ratio=1 / written)  # exactly one update
    with torch.no_grad():  # online and target networks differ, so that double DQN matters
        gen = torch.Generator().manual_seed(5)
        for p in policy.q_target.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen))
    gen = torch.Generator().manual_seed(0)
    gen.set_state(policy.generator.get_state())
    batch = buffer.sample(16, generator=gen)  # the batch the update will draw
    assert not torch.all(batch["discount"] == 0.9)  # n-step: gamma**m with m up to 3
    with torch.no_grad():
        next_target = policy.q_target(batch["next_obs"])
        if double:
            next_q = next_target.gather(-1, policy.q(batch["next_obs"]).argmax(-1, keepdim=True)).squeeze(-1)
        else:
            next_q = next_target.max(-1).values
        y = batch["rewards"] + batch["discount"] * (1 - batch["terminated"]) * next_q
        q = policy.q(batch["obs"]).gather(-1, batch["actions"].reshape(-1, 1)).squeeze(-1)
        expected = F.mse_loss(q, y).item()
    metrics = policy.learn(buffer)
    assert metrics["stats/updates"] == 1
    assert metrics["loss/td"] == pytest.approx(expected, rel=1e-5)


def test_learn_makes_utd_ratio_updates_per_new_transition():
    policy, buffer = make(utd_ratio=0.5, learning_starts=8), make_buffer()
    buffer.add(chunk(10))
    assert policy.learn(buffer)["stats/updates"] == 6  # floor(0.5 * (20 - 8))
    assert policy.learn(buffer)["stats/updates"] == 0


def test_epsilon_decays_linearly_and_travels_with_the_weights():
    params = DQNParams(exploration_fraction=0.5, exploration_initial_eps=1.0, exploration_final_eps=0.1)
    assert [epsilon_at(p, params) for p in (0.0, 0.25, 0.5, 0.9)] == pytest.approx([1.0, 0.55, 0.1, 0.1])
    learner = make(exploration_fraction=0.5, exploration_final_eps=0.1)
    rollout = make(PolicyRole.ROLLOUT, seed=1, exploration_fraction=0.5, exploration_final_eps=0.1)
    obs = np.zeros((2000, 4), np.float32)  # one observation: the greedy action is always the same
    assert len(np.unique(rollout.act(obs).actions)) == 3  # epsilon 1: uniform
    buffer = make_buffer()
    buffer.add(chunk(4))
    assert learner.learn(buffer, progress=0.6)["stats/epsilon"] == pytest.approx(0.1)
    rollout.set_weights(learner.get_weights())
    actions = rollout.act(obs).actions
    greedy = rollout.act(obs, deterministic=True).actions[0]
    assert 0.9 < np.mean(actions == greedy) < 0.97  # 1 - 0.1 * 2/3 = 0.933


def test_hard_target_update_every_interval():
    def same(policy):
        return all(torch.equal(a, b) for a, b in zip(policy.q.parameters(), policy.q_target.parameters(),
                                                      strict=True))

    early, on_time = make(target_update_interval=5), make(target_update_interval=4)
    for policy in (early, on_time):
        buffer = make_buffer()
        buffer.add(chunk(2))  # 4 transitions -> 4 updates
        policy.learn(buffer)
    assert not same(early)  # 4 updates, the copy comes at the 5th
    assert same(on_time)  # the 4th update copied the online network


def test_prioritized_replay_gets_td_errors_as_priorities():
    policy, buffer = make(batch_size=32), make_buffer(prioritized=True, alpha=1.0)
    buffer.add(chunk(32))
    everything = np.arange(len(buffer))
    assert np.allclose(buffer.sampler.priorities(everything), 1.0)  # new items: the max priority so far
    policy.learn(buffer)
    after = buffer.sampler.priorities(everything)
    assert not np.allclose(after, 1.0) and len(np.unique(after)) > 10
    # the last batch's |TD errors| (+eps) are now the priorities of the items it drew
    gen = torch.Generator().manual_seed(0)
    gen.set_state(policy.generator.get_state())
    batch = buffer.sample(32, generator=gen)
    assert batch["weights"].min() < 1.0  # importance weights correct for the non-uniform draw


def test_unsupported_spaces_are_refused():
    with pytest.raises(TypeError, match="Discrete action space"):
        DQNPolicy(DQNParams(), observation_space=OBS, action_space=spaces.Box(-1, 1, (2,)), role=PolicyRole.LEARNER)
    with pytest.raises(TypeError, match=r"buffer.type: replay"):
        make().learn(object())
