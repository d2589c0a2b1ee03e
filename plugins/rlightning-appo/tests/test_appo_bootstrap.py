"""APPO's bootstrap values (end of rollout, time-limit truncations) come from the learner's current weights when
the ``appo_rollout`` buffer keeps the next observations, not from the stale ones the rollout copy recorded."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from rlightning_appo.buffer import APPORolloutBuffer
from rlightning_appo.params import APPOParams
from rlightning_appo.policy import APPOPolicy
from rlightning_appo.vtrace import vtrace

from rlightning_core.buffer.base import BufferSpec
from rlightning_core.buffer.params import RolloutBufferParams
from rlightning_core.buffer.rollout import RolloutBuffer
from rlightning_core.testing.buffers import make_chunk

T, N = 6, 3
OBS, ACT = spaces.Box(-1.0, 1.0, (4,), np.float32), spaces.Discrete(2)


def filled(buffer_cls: type) -> tuple[RolloutBuffer, object]:
    spec = BufferSpec(observation_space=OBS, action_space=ACT, num_envs=N, num_steps=T,
                      extras_spec=APPOPolicy.extras_spec)
    buffer = buffer_cls(RolloutBufferParams(), spec=spec)
    chunk = make_chunk(spec, seed=3)
    # every column is cut by the time limit once, and the recorded bootstrap values are far off (stale)
    chunk.data["terminated"][:] = False
    chunk.data["truncated"][:] = False
    chunk.data["truncated"][[1, 3, 4], [0, 1, 2]] = True
    chunk.data["bootstrap_values"][:] = 100.0
    chunk.last_values = np.full(N, -100.0, dtype=np.float32)
    buffer.add(chunk)
    return buffer, chunk


@pytest.mark.parametrize("lam", [1.0, 0.9])
def test_bootstrap_values_are_the_learners(lam):
    policy = APPOPolicy(APPOParams(hidden_sizes=[16], gae_lambda=lam), observation_space=OBS, action_space=ACT,
                        seed=0)
    buffer, chunk = filled(APPORolloutBuffer)
    assert buffer.needs_next_obs and torch.equal(buffer["next_obs"], torch.as_tensor(chunk.data["next_obs"]))
    data, _ = policy._targets(buffer)

    def v(x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(policy.value(x.reshape(-1, 4))).reshape(x.shape[:-1])

    values, next_values = v(chunk.data["obs"]), v(chunk.data["next_obs"])
    truncated = torch.as_tensor(chunk.data["truncated"])
    lp = torch.as_tensor(chunk.data["log_prob"])
    target_lp = data["target_lp"].reshape(T, N)
    expected = vtrace(lp, target_lp, torch.as_tensor(chunk.data["rewards"]), values, next_values[-1],
                      gamma=policy.params.gamma, terminated=torch.zeros(T, N, dtype=torch.bool),
                      truncated=truncated, bootstrap_values=torch.where(truncated, next_values, 0.0), lambda_=lam)
    torch.testing.assert_close(data["returns"].reshape(T, N), expected.vs, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(data["advantages"].reshape(T, N), expected.advantages, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close((data["advantages"] * data["rhos"]).reshape(T, N), expected.pg_advantages,
                               rtol=1e-5, atol=1e-5)
    assert data["returns"].abs().max() < 50  # none of the stale +-100 bootstrap values got in
    # clip_value's anchor is the learner's values too, not the ones the rollout copy recorded
    torch.testing.assert_close(data["value"].reshape(T, N), values)
    assert not torch.allclose(data["value"].reshape(T, N), torch.as_tensor(chunk.data["value"]))


def test_the_plain_rollout_buffer_keeps_the_recorded_bootstrap_values(caplog):
    """Without next observations the recorded values are all there is (and a warning says so)."""
    policy = APPOPolicy(APPOParams(hidden_sizes=[16]), observation_space=OBS, action_space=ACT, seed=0)
    buffer, chunk = filled(RolloutBuffer)
    with caplog.at_level("WARNING", logger="rlightning_appo.policy"):
        data, _ = policy._targets(buffer)
    values = torch.as_tensor(policy.value(chunk.data["obs"].reshape(-1, 4))).reshape(T, N)
    expected = vtrace(torch.as_tensor(chunk.data["log_prob"]), data["target_lp"].reshape(T, N),
                      torch.as_tensor(chunk.data["rewards"]), values, torch.as_tensor(chunk.last_values),
                      gamma=policy.params.gamma, terminated=torch.zeros(T, N, dtype=torch.bool),
                      truncated=torch.as_tensor(chunk.data["truncated"]),
                      bootstrap_values=torch.as_tensor(chunk.data["bootstrap_values"]), lambda_=1.0)
    torch.testing.assert_close(data["returns"].reshape(T, N), expected.vs, rtol=1e-5, atol=1e-4)
    assert data["returns"].abs().max() > 50


def test_appo_rollout_buffer_conforms(conformance):
    conformance.check_buffer("appo_rollout", observation_space=OBS, action_space=ACT,
                             extras_spec=APPOPolicy.extras_spec)
