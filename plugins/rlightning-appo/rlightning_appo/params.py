"""APPO's options (``policy.params``): PPO's, plus the V-trace correction and its truncation levels."""

from __future__ import annotations

from attrs import define, field
from rlightning_ppo.params import PPOParams

from rlightning_core.config.validators import ge, gt, in_range


@define(frozen=True, kw_only=True)
class APPOParams(PPOParams):
    """Options of the ``appo`` policy: every option of ``ppo`` (networks, optimizer, losses) plus these."""

    vtrace: bool = True
    """Correct for the policy lag with V-trace: value targets and advantages weighted by the truncated
    importance ratios of the learner's policy to the behaviour policy that collected each step. ``false``: the
    same targets with every ratio taken as 1 (GAE-``gae_lambda`` over the learner's current values, no
    correction), for comparison."""
    rho_bar: float = field(default=1.0, validator=gt(0))
    """Truncation of the importance ratios in V-trace's TD errors and policy-gradient advantages
    (:math:`\\bar\\rho`; larger trusts off-policy data more, at higher variance)."""
    c_bar: float = field(default=1.0, validator=gt(0))
    """Truncation of V-trace's trace coefficients (:math:`\\bar c`; how far back a TD error reaches)."""
    clip: bool = True
    """Clip the surrogate objective as PPO does, with the ratio of the policy being updated to the learner's
    policy at the start of the learn call (``clip_ratio``). ``false``: the plain policy gradient
    ``-A_t log pi(a_t|x_t)`` of IMPALA."""
    gae_lambda: float = field(default=1.0, validator=in_range(0, 1))
    """The :math:`\\lambda` of V-trace's traces (``c_t = lambda * min(c_bar, ratio)``); 1 as in IMPALA."""
    epochs: int = field(default=1, validator=ge(1))
    """Passes over each rollout (1: every sample is used once, as in IMPALA)."""
    learner_delay_s: float = field(default=0.0, validator=ge(0))
    """Benchmark knob: sleep this many seconds after every learn call, to emulate a slow learner and so a larger
    policy lag (``benchmarks/appo_vtrace.py``). 0 (the default): no sleep."""
