"""V-trace against numbers worked out by hand, GAE in the on-policy case, truncation of the ratios, episode ends."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gymnasium import spaces
from rlightning_appo.vtrace import vtrace

from rlightning_core.buffer.base import BufferSpec, Chunk
from rlightning_core.buffer.params import RolloutBufferParams
from rlightning_core.buffer.rollout import RolloutBuffer

#: Three steps of one env: rewards 1, 2, 3; values 0.5, 1.0, 1.5; bootstrap value 2.0; gamma 0.9.
REWARDS = torch.tensor([[1.0], [2.0], [3.0]])
VALUES = torch.tensor([[0.5], [1.0], [1.5]])
LAST = torch.tensor([2.0])
MU = torch.log(torch.full((3, 1), 0.5))
NO_END = torch.zeros(3, 1, dtype=torch.bool)


def col(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float32).unsqueeze(1)


def test_matches_a_hand_computed_example_with_both_truncations():
    # target/behaviour ratios 0.5, 2.0, 1.0; rho_bar 1.5, c_bar 1 -> rho = 0.5, 1.5, 1 and c = 0.5, 1, 1.
    # V' = 1.0, 1.5, 2.0; delta_t = rho_t (r_t + 0.9 V'_t - V_t) = 0.5*1.4, 1.5*2.35, 1*3.3 = 0.7, 3.525, 3.3
    # v - V: 3.3; 3.525 + 0.9*1*3.3 = 6.495; 0.7 + 0.9*0.5*6.495 = 3.62275 -> vs = 4.12275, 7.495, 4.8
    # A_t = rho_t (r_t + 0.9 v_{t+1} - V_t): 0.5*(1 + 0.9*7.495 - 0.5) = 3.62275; 1.5*(2 + 0.9*4.8 - 1) = 7.98;
    #       1*(3 + 0.9*2.0 - 1.5) = 3.3
    pi = MU + torch.log(col(0.5, 2.0, 1.0))
    out = vtrace(MU, pi, REWARDS, VALUES, LAST, gamma=0.9, terminated=NO_END, rho_bar=1.5, c_bar=1.0)
    torch.testing.assert_close(out.vs, col(4.12275, 7.495, 4.8))
    torch.testing.assert_close(out.pg_advantages, col(3.62275, 7.98, 3.3))
    torch.testing.assert_close(out.clipped_rhos, col(0.5, 1.5, 1.0))


def test_hand_computed_with_rho_bar_equal_to_c_bar():
    # rho = c = 0.5, 1, 1; delta = 0.7, 2.35, 3.3; v - V = 3.3, 5.32, 3.094 -> vs = 3.594, 6.32, 4.8
    pi = MU + torch.log(col(0.5, 2.0, 1.0))
    out = vtrace(MU, pi, REWARDS, VALUES, LAST, gamma=0.9, terminated=NO_END)
    torch.testing.assert_close(out.vs, col(3.594, 6.32, 4.8))
    torch.testing.assert_close(out.pg_advantages, col(3.094, 5.32, 3.3))


def test_ratios_above_the_truncation_levels_change_nothing():
    """With rho_bar = c_bar = 1, a ratio of 2 or of 50 on every step gives the on-policy result."""
    on = vtrace(MU, MU, REWARDS, VALUES, LAST, gamma=0.9, terminated=NO_END)
    for ratio in (2.0, 50.0):
        off = vtrace(MU, MU + math.log(ratio), REWARDS, VALUES, LAST, gamma=0.9, terminated=NO_END)
        torch.testing.assert_close(off.vs, on.vs)
        torch.testing.assert_close(off.pg_advantages, on.pg_advantages)
    # untruncated (inf), the same ratio of 2 doubles every TD error and changes the targets
    loose = vtrace(MU, MU + math.log(2.0), REWARDS, VALUES, LAST, gamma=0.9, terminated=NO_END,
                   rho_bar=math.inf, c_bar=math.inf)
    assert not torch.allclose(loose.vs, on.vs)
    torch.testing.assert_close(loose.clipped_rhos, torch.full((3, 1), 2.0))


def test_a_termination_cuts_the_recursion_and_zeroes_the_bootstrap():
    # terminated at step 1: V' = 1.0, 0, 2.0; delta = 1.4, 1.0, 3.3; v - V = 3.3, 1.0, 1.4 + 0.9*1.0 = 2.3
    # -> vs = 2.8, 2.0, 4.8, i.e. 1 + 0.9*2 | 2 | 3 + 0.9*2.0
    ended = torch.tensor([[False], [True], [False]])
    out = vtrace(MU, MU, REWARDS, VALUES, LAST, gamma=0.9, terminated=ended)
    torch.testing.assert_close(out.vs, col(2.8, 2.0, 4.8))
    torch.testing.assert_close(out.pg_advantages, col(2.3, 1.0, 3.3))


def test_a_truncation_bootstraps_from_the_final_observation_and_cuts_the_recursion():
    # truncated at step 1 with V(final obs) = 10: V' = 1.0, 10, 2.0; delta1 = 2 + 9 - 1 = 10, not carried back
    # past step 1's episode end into step 2: vs = 1 + 0.9*11, 2 + 0.9*10, 3 + 0.9*2 = 10.9, 11, 4.8
    cut = torch.tensor([[False], [True], [False]])
    boot = col(0.0, 10.0, 0.0)
    out = vtrace(MU, MU, REWARDS, VALUES, LAST, gamma=0.9, terminated=NO_END, truncated=cut, bootstrap_values=boot)
    torch.testing.assert_close(out.vs, col(10.9, 11.0, 4.8))
    # off-policy, the steps of the next episode do not reach back across the cut
    pi = MU + torch.log(col(1.0, 1.0, 0.25))
    off = vtrace(MU, pi, REWARDS, VALUES, LAST, gamma=0.9, terminated=NO_END, truncated=cut, bootstrap_values=boot)
    torch.testing.assert_close(off.vs[:2], out.vs[:2])


def _random_rollout(t: int, n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(t, n, generator=g)
    values = torch.randn(t, n, generator=g)
    last = torch.randn(n, generator=g)
    terminated = torch.rand(t, n, generator=g) < 0.1
    truncated = (torch.rand(t, n, generator=g) < 0.1) & ~terminated
    boot = torch.where(truncated, torch.randn(t, n, generator=g), torch.zeros(t, n))
    return rewards, values, last, terminated, truncated, boot


def test_on_policy_vs_are_the_n_step_bootstrapped_returns():
    """Every ratio 1: vs_t = r_t + gamma r_{t+1} + ... up to the episode end or the rollout end, bootstrapped."""
    t, n, gamma = 12, 3, 0.97
    rewards, values, last, terminated, truncated, boot = _random_rollout(t, n, seed=0)
    logp = torch.randn(t, n)
    out = vtrace(logp, logp, rewards, values, last, gamma=gamma, terminated=terminated, truncated=truncated,
                 bootstrap_values=boot)
    expected = torch.empty(t, n)
    for env in range(n):  # an independent forward loop per start step
        for s in range(t):
            ret, disc = 0.0, 1.0
            for k in range(s, t):
                ret += disc * float(rewards[k, env])
                disc *= gamma
                if terminated[k, env]:
                    break
                if truncated[k, env]:
                    ret += disc * float(boot[k, env])
                    break
            else:
                ret += disc * float(last[env])
            expected[s, env] = ret
    torch.testing.assert_close(out.vs, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lam", [1.0, 0.9])
def test_on_policy_matches_the_rollout_buffers_gae(lam):
    """Every ratio 1: vs are GAE-lambda's returns; with lambda 1 the advantages are GAE's too."""
    t, n, gamma = 16, 4, 0.99
    rewards, values, last, terminated, truncated, boot = _random_rollout(t, n, seed=1)
    spec = BufferSpec(observation_space=spaces.Box(-1, 1, (1,), np.float32), action_space=spaces.Discrete(2),
                      num_envs=n, num_steps=t, extras_spec={"value": ((), np.float32)})
    buffer = RolloutBuffer(RolloutBufferParams(), spec=spec)
    data = {"obs": np.zeros((t, n, 1), np.float32), "actions": np.zeros((t, n), np.int64),
            "rewards": rewards.numpy(), "terminated": terminated.numpy(), "truncated": truncated.numpy(),
            "bootstrap_values": boot.numpy(), "value": values.numpy()}
    buffer.add(Chunk(data=data, last_obs=np.zeros((n, 1), np.float32), last_values=last.numpy()))
    buffer.compute_returns_and_advantages(gamma=gamma, gae_lambda=lam)
    logp = torch.zeros(t, n)
    out = vtrace(logp, logp, rewards, values, last, gamma=gamma, terminated=terminated, truncated=truncated,
                 bootstrap_values=boot, lambda_=lam)
    torch.testing.assert_close(out.vs, buffer["returns"], rtol=1e-5, atol=1e-5)
    if lam == 1.0:
        torch.testing.assert_close(out.pg_advantages, buffer["advantages"], rtol=1e-5, atol=1e-5)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="values has shape"):
        vtrace(MU, MU, REWARDS, VALUES[:2], LAST, gamma=0.9, terminated=NO_END)
    with pytest.raises(ValueError, match="need bootstrap_values"):
        vtrace(MU, MU, REWARDS, VALUES, LAST, gamma=0.9, terminated=NO_END, truncated=NO_END)


def test_pg_advantages_are_the_ratio_times_the_advantages():
    rewards, values, last, terminated, truncated, boot = _random_rollout(8, 3, seed=2)
    gen = torch.Generator().manual_seed(3)
    mu, pi = torch.randn(8, 3, generator=gen), torch.randn(8, 3, generator=gen)
    out = vtrace(mu, pi, rewards, values, last, gamma=0.9, terminated=terminated, truncated=truncated,
                 bootstrap_values=boot)
    assert not torch.equal(out.clipped_rhos, torch.ones(8, 3))
    torch.testing.assert_close(out.pg_advantages, out.clipped_rhos * out.advantages)


def test_normalized_advantages_are_weighted_after_the_normalization():
    """A step whose ratio is truncated to 0 contributes no policy gradient, normalized or not."""
    from rlightning_appo.policy import pg_advantages

    adv = torch.tensor([5.0, 6.0, 7.0, 8.0])  # all positive: normalizing shifts them by the mean
    rhos = torch.tensor([0.0, 1.0, 0.5, 1.0])
    out = pg_advantages(adv, rhos, normalize=True)
    assert out[0] == 0.0
    norm = (adv - adv.mean()) / (adv.std() + 1e-8)
    torch.testing.assert_close(out, rhos * norm)
    torch.testing.assert_close(pg_advantages(adv, rhos, normalize=False), rhos * adv)
