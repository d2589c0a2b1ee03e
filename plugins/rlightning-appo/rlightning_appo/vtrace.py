r"""V-trace (Espeholt et al., 2018, "IMPALA"): off-policy value targets and policy-gradient advantages.

Pure torch, no dependency on the rest of rlightning, over time-major ``[T, N]`` tensors (``T`` steps of ``N``
envs, as the rollout buffer stores them).

With :math:`\rho_t = \min(\bar\rho, \pi(a_t|x_t) / \mu(a_t|x_t))` and
:math:`c_t = \lambda \min(\bar c, \pi(a_t|x_t) / \mu(a_t|x_t))` (:math:`\pi` the target policy being learned,
:math:`\mu` the behaviour policy that acted), and :math:`V'_t` the value of the state after step ``t``:

.. math::

    V'_t &= \begin{cases} 0 & \text{terminated}_t \\
                          \text{bootstrap\_values}_t & \text{truncated}_t \\
                          V_{t+1} & \text{otherwise, } t < T-1 \\
                          \text{last\_values} & \text{otherwise, } t = T-1 \end{cases} \\
    \delta_t &= \rho_t \, (r_t + \gamma V'_t - V_t) \\
    v_t - V_t &= \delta_t + \gamma c_t (1 - d_t) (v_{t+1} - V_{t+1}), \qquad v_T - V_T = 0 \\
    A_t &= \rho_t \, (r_t + \gamma v'_t - V_t)

where :math:`d_t = \text{terminated}_t \lor \text{truncated}_t` cuts the recursion at episode ends and
:math:`v'_t` is :math:`V'_t` with :math:`v_{t+1}` in place of :math:`V_{t+1}` (``0`` after a termination, the
bootstrap value after a truncation, ``last_values`` after the last step). :math:`v_t` (``vs``) are the value
targets, :math:`A_t` the policy-gradient advantages (paper, eq. 1 and section 4.2).

On-policy (every ratio 1) with :math:`\bar\rho, \bar c \ge 1`, :math:`v_t - V_t` is GAE-:math:`\lambda`'s
advantage and :math:`v_t` its return; with :math:`\lambda = 1` both are the n-step bootstrapped return.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["VTraceReturns", "vtrace"]


class VTraceReturns(NamedTuple):
    """What :func:`vtrace` returns, each ``[T, N]`` and detached from the graph."""

    vs: torch.Tensor
    """Value targets :math:`v_t`."""
    pg_advantages: torch.Tensor
    """Policy-gradient advantages :math:`A_t = \\rho_t (r_t + \\gamma v'_t - V_t)`."""
    clipped_rhos: torch.Tensor
    """:math:`\\rho_t`, the importance ratios truncated at :math:`\\bar\\rho`."""
    advantages: torch.Tensor
    """:math:`r_t + \\gamma v'_t - V_t`, the advantages before the ratio: ``pg_advantages = clipped_rhos *
    advantages`` (a learner that normalizes advantages normalizes these, then weights them)."""


@torch.no_grad()
def vtrace(
    behaviour_log_probs: torch.Tensor,
    target_log_probs: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    last_values: torch.Tensor,
    *,
    gamma: float,
    terminated: torch.Tensor,
    truncated: torch.Tensor | None = None,
    bootstrap_values: torch.Tensor | None = None,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    lambda_: float = 1.0,
) -> VTraceReturns:
    """V-trace targets and advantages of ``T`` steps of ``N`` envs (see the module docstring for the maths).

    Args:
        behaviour_log_probs: ``[T, N]`` log mu(a_t|x_t), recorded by the policy that acted.
        target_log_probs: ``[T, N]`` log pi(a_t|x_t) under the policy being learned.
        rewards: ``[T, N]`` r_t.
        values: ``[T, N]`` V(x_t) under the current value function.
        last_values: ``[N]`` value of the observation after step ``T-1`` (the bootstrap value).
        gamma: discount factor.
        terminated: ``[T, N]`` bool, the episode ended at step ``t`` in a terminal state (``V'_t = 0``).
        truncated: ``[T, N]`` bool, the episode was cut at step ``t`` (time limit); ``None``: never.
        bootstrap_values: ``[T, N]`` value of the true final observation where ``truncated`` (else ignored).
        rho_bar: truncation of the ratios in the TD errors and the advantages (``inf``: none).
        c_bar: truncation of the trace coefficients (``inf``: none).
        lambda_: extra discount of the traces (``c_t = lambda_ * min(c_bar, ratio)``; 1 in the paper's default).

    Returns:
        :class:`VTraceReturns` (``vs``, ``pg_advantages``, ``clipped_rhos``), float32 ``[T, N]``.

    Raises:
        ValueError: shapes disagree, or ``truncated`` is given without ``bootstrap_values``.
    """
    shape = rewards.shape
    if rewards.dim() != 2:
        raise ValueError(f"vtrace(): rewards must be [T, N], got shape {tuple(shape)}")
    for name, x in (("behaviour_log_probs", behaviour_log_probs), ("target_log_probs", target_log_probs),
                    ("values", values), ("terminated", terminated)):
        if x.shape != shape:
            raise ValueError(f"vtrace(): {name} has shape {tuple(x.shape)}, rewards {tuple(shape)}")
    if last_values.shape != shape[1:]:
        raise ValueError(f"vtrace(): last_values has shape {tuple(last_values.shape)}, expected {tuple(shape[1:])}")
    if truncated is not None and bootstrap_values is None:
        raise ValueError("vtrace(): truncated steps need bootstrap_values (the value of their final observation)")
    f32 = torch.float32
    rewards, values, last_values = rewards.to(f32), values.to(f32), last_values.to(f32)
    terminated = terminated.bool()
    done = terminated if truncated is None else terminated | truncated.bool()
    ratios = (target_log_probs.to(f32) - behaviour_log_probs.to(f32)).exp()
    rhos = ratios.clamp(max=rho_bar)
    cs = lambda_ * ratios.clamp(max=c_bar)

    # the value of the state after each step, under the current value function
    next_values = torch.cat([values[1:], last_values.unsqueeze(0)], 0)
    if truncated is not None:
        next_values = torch.where(truncated.bool(), bootstrap_values.to(f32), next_values)
    next_values = torch.where(terminated, torch.zeros_like(next_values), next_values)
    deltas = rhos * (rewards + gamma * next_values - values)
    carry = gamma * cs * (~done).to(f32)

    # backward recursion of v_t - V_t, cut where an episode ends
    corrections = torch.empty_like(values)
    acc = torch.zeros_like(last_values)
    for t in range(shape[0] - 1, -1, -1):
        acc = deltas[t] + carry[t] * acc
        corrections[t] = acc
    vs = values + corrections

    # advantages: the one-step target with v_{t+1} in place of V_{t+1} (bootstrap ends as in next_values)
    next_vs = torch.cat([vs[1:], last_values.unsqueeze(0)], 0)
    next_vs = torch.where(done, next_values, next_vs)
    advantages = rewards + gamma * next_vs - values
    return VTraceReturns(vs=vs, pg_advantages=rhos * advantages, clipped_rhos=rhos, advantages=advantages)
