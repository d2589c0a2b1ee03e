"""``rsl_rl_ppo`` learns through RSL-RL's own PPO: its storage, time-out bootstrapping, returns and update."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces
from rlightning_rsl_rl.params import RslRlPPOParams
from rlightning_rsl_rl.policy import RslRlPPOPolicy

from rlightning_core.buffer.base import BufferSpec
from rlightning_core.buffer.params import RolloutBufferParams
from rlightning_core.buffer.rollout import RolloutBuffer
from rlightning_core.errors import UserError
from rlightning_core.policy.base import PolicyRole
from rlightning_core.testing.buffers import make_chunk

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "inverted_pendulum_rsl_rl.yaml"
OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = spaces.Box(-1.0, 1.0, (2,), np.float32)


def _policy(**params):
    p = RslRlPPOParams(actor_hidden_dims=[16], critic_hidden_dims=[16], **params)
    return RslRlPPOPolicy(p, observation_space=OBS, action_space=ACT, role=PolicyRole.LEARNER, seed=0)


def _buffer(policy, steps=8, envs=4):
    spec = BufferSpec(observation_space=OBS, action_space=ACT, num_envs=envs, num_steps=steps,
                      extras_spec=dict(type(policy).extras_spec))
    buffer = RolloutBuffer(RolloutBufferParams(), spec=spec)
    chunk = make_chunk(spec, seed=3)
    chunk.data["truncated"][2, 1] = True  # at least one time-out
    chunk.data["terminated"][2, 1] = False
    buffer.add(chunk)
    return buffer, chunk


def test_learn_replays_the_rollout_into_rsl_rl_storage():
    policy = _policy(gamma=0.9)
    buffer, chunk = _buffer(policy)
    metrics = policy.learn(buffer)
    st = policy.alg.storage
    d = chunk.data
    time_outs = d["truncated"] & ~d["terminated"]
    # RSL-RL's process_env_step bootstraps time-outs with the step's own value: r + gamma * V(s_t)
    want = d["rewards"] + 0.9 * d["value"] * time_outs
    np.testing.assert_allclose(st.rewards.squeeze(-1).numpy(), want, rtol=1e-6)
    np.testing.assert_array_equal(st.dones.squeeze(-1).numpy().astype(bool), d["terminated"] | d["truncated"])
    np.testing.assert_allclose(st.actions_log_prob.squeeze(-1).numpy(), d["log_prob"], rtol=1e-6)
    # PPO.compute_returns bootstrapped the last step with the buffer's last values
    last = st.num_transitions_per_env - 1
    not_done = 1.0 - st.dones[last].float().squeeze(-1)
    ret_last = st.rewards[last].squeeze(-1) + 0.9 * not_done * torch.as_tensor(chunk.last_values)
    np.testing.assert_allclose(st.returns[last].squeeze(-1).numpy(), ret_last.numpy(), rtol=1e-5, atol=1e-5)
    assert {"loss/policy", "loss/value", "loss/entropy", "stats/lr"} <= set(metrics)
    assert policy.weight_version == 1


def test_adaptive_schedule_moves_the_learning_rate_and_state_keeps_it():
    policy = _policy(learning_rate=1e-3, schedule="adaptive", desired_kl=1e-6)
    buffer, _ = _buffer(policy)
    policy.learn(buffer)
    assert policy.alg.learning_rate < 1e-3  # KL above twice the target: RSL-RL divides the rate by 1.5
    other = _policy(learning_rate=1e-3)
    other.load_state_dict(policy.state_dict())
    assert other.alg.learning_rate == pytest.approx(policy.alg.learning_rate)
    assert other.alg.optimizer.param_groups[0]["lr"] == pytest.approx(policy.alg.learning_rate)


def test_discrete_actions_are_refused():
    with pytest.raises(UserError, match=r"action space Discrete\(.*supports 1-D Box action spaces"):
        RslRlPPOPolicy(RslRlPPOParams(), observation_space=OBS, action_space=spaces.Discrete(3),
                       role=PolicyRole.LEARNER)


def test_too_many_minibatches_are_refused():
    policy = _policy(num_mini_batches=64)
    buffer, _ = _buffer(policy, steps=4, envs=2)
    with pytest.raises(UserError, match=r"policy\.params\.num_mini_batches"):
        policy.learn(buffer)


def test_too_many_minibatches_are_refused_when_the_config_is_validated():
    from rlightning_core import load_config
    from rlightning_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"policy\.params\.num_mini_batches: 64 minibatches of a 4 x 2 rollout"):
        load_config(EXAMPLE, ["engine.params.rollout_steps=4", "env.num_envs=2", "env.num_workers=1",
                              "policy.params.num_mini_batches=64"])


@pytest.mark.slow
def test_example_solves_inverted_pendulum(tmp_path):
    from rlightning_core import load_config
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

    config = load_config(EXAMPLE, ["logging.progress=false", "engine.total_steps=60000"])
    env_group = build_env_group(config.env, seed=config.seed)
    policy_group = build_policy_group(config.policy.type, config.policy, config.cluster)
    buffer = build_data_buffer(config.buffer.type, config.buffer)
    result = build_engine(config, env_group, policy_group, buffer).run(tmp_path / "run")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r["eval/episode_return_mean"] for r in rows if "eval/episode_return_mean" in r]
    assert result.stop_reason == "target_eval_return", (result, evals)
    assert evals[0] < 500 and evals[-1] >= 950, evals


def _run(tmp_path, name, *overrides):
    from rlightning_core import load_config
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

    config = load_config(EXAMPLE, ["logging.progress=false", "engine.eval_every=0", "checkpoint.at_end=false",
                                   *overrides])
    env_group = build_env_group(config.env, seed=config.seed)
    policy_group = build_policy_group(config.policy.type, config.policy, config.cluster)
    buffer = build_data_buffer(config.buffer.type, config.buffer)
    engine = build_engine(config, env_group, policy_group, buffer)
    engine.run(tmp_path / name)
    return {k: v.clone() for k, v in engine.policy_group.learner.actor.state_dict().items()}


def test_same_seed_gives_identical_parameters(tmp_path):
    a = _run(tmp_path, "a", "engine.total_steps=1024")
    b = _run(tmp_path, "b", "engine.total_steps=1024")
    c = _run(tmp_path, "c", "engine.total_steps=1024", "seed=1")
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_normalizer_buffers_stay_the_same_tensors_across_learn():
    """Ray's weight sync sends flat buckets the module tensors are views of: learn must update them in place."""
    policy = _policy(obs_normalization=True)
    buffers = {name: buf for name, buf in policy.actor.named_buffers()}
    std_before = buffers["obs_normalizer._std"].clone()
    buffer, _ = _buffer(policy)
    policy.learn(buffer)
    after = dict(policy.actor.named_buffers())
    assert all(after[name] is buf for name, buf in buffers.items())
    assert not torch.equal(after["obs_normalizer._std"], std_before)  # updated, in the same tensor


def test_rsl_rl_sees_no_default_process_group_while_updating(monkeypatch):
    import torch.distributed as dist

    seen = []
    policy = _policy(obs_normalization=True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)  # as in a Ray learner with its weight-sync group
    update = policy.alg.update
    monkeypatch.setattr(policy.alg, "update", lambda: (seen.append(dist.is_initialized()), update())[1])
    buffer, _ = _buffer(policy)
    policy.learn(buffer)  # would call all_reduce (and fail: no group exists) if RSL-RL saw one
    assert seen == [False] and dist.is_initialized()
