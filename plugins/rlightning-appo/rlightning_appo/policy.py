"""APPO: PPO's actor-critic trained from lagged rollouts with V-trace targets (Espeholt et al., 2018).

Under the ``async`` engine the env runners keep collecting with the weights they last received while the learner
trains, so a rollout may come from a policy some versions older than the learner's (its *policy lag*). Each
step's behaviour log-probability is recorded with the transition (the ``log_prob`` extra, as PPO stores it). A
learn call then, over the whole ``[T, N]`` rollout:

1. evaluates the learner's current policy and value function on every stored observation (target log-probs
   and values, no gradient);
2. computes V-trace value targets ``vs`` and policy-gradient advantages (:func:`rlightning_appo.vtrace.vtrace`),
   which correct the lag with importance ratios truncated at ``rho_bar`` / ``c_bar`` (``vtrace: false``: every
   ratio taken as 1, i.e. GAE over the current values with no correction). With ``normalize_advantages`` the
   advantages are normalized per minibatch *before* they are weighted by the truncated ratio, so a step the
   learner has moved away from (ratio near 0) keeps an advantage near 0 instead of the minibatch's shifted mean;
3. runs ``epochs`` passes of minibatch updates: policy loss on the advantages — PPO's clipped surrogate with
   the ratio to the step-1 policy (``clip: true``) or IMPALA's ``-A log pi`` (``clip: false``) —, value loss
   ``0.5 (V - vs)^2`` (with ``clip_value``, clipped around the step-1 values, not the stale recorded ones), minus
   ``ent_coef`` times the entropy.

Bootstrap values (after the rollout's last step, and at time-limit truncations) are computed in step 1 too, with
the learner's current weights, from the next observations the ``appo_rollout`` buffer stores
(:mod:`rlightning_appo.buffer`). With the builtin ``rollout`` buffer, which does not keep them, they are the
stale ones the rollout copy computed when it collected (a warning says so once).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch
from rlightning_ppo.losses import apply_lr, value_loss
from rlightning_ppo.policy import PPOPolicy, _explained_variance

from rlightning_appo.vtrace import vtrace
from rlightning_core.policy.numerics import guard_of

__all__ = ["APPOPolicy", "pg_advantages"]

_log = logging.getLogger(__name__)

#: Relative margin above ``rho_bar`` for a ratio to count as truncated in ``stats/rho_clip_fraction``: on-policy
#: ratios differ from 1 by the rounding between the rollout copy's and the learner's log-probabilities.
_ROUNDING = 1e-4

#: Rollout fields an APPO learn call reads (``rewards`` ... from the env, ``log_prob`` from the behaviour policy).
_FIELDS = ("obs", "actions", "log_prob", "value", "rewards", "terminated", "truncated", "bootstrap_values")


class APPOPolicy(PPOPolicy):
    """PPO's actor-critic with a V-trace learner. Extras stored per step: ``log_prob`` (behaviour) and ``value``."""

    _plugin_name = "appo"

    def _targets(self, buffer: Any) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """Steps 1-2: the rollout flattened to ``[T*N, ...]`` with ``advantages``, ``returns`` (vs), ``target_lp``."""
        p = self.params
        try:
            tensors = {k: buffer[k] for k in _FIELDS}
            last_values = buffer.last_values
        except (KeyError, TypeError, AttributeError):
            raise TypeError(f"appo learns from a rollout buffer (buffer.type: rollout), got "
                            f"{type(buffer).__name__}") from None
        if not buffer.full:
            raise RuntimeError("appo: learn() called before every column of the rollout buffer was filled")
        t, n = tensors["rewards"].shape[:2]
        data = self.on_device({k: v.reshape(t * n, *v.shape[2:]) for k, v in tensors.items()})
        with torch.no_grad():
            target_lp, _, values = self._evaluate(data["obs"], data["actions"])
        values = values.reshape(t, n)
        bootstrap = data["bootstrap_values"].reshape(t, n)
        last_values = last_values.to(values.device)
        next_obs = _next_obs(buffer)
        if next_obs is not None:  # bootstrap values with the learner's weights too, not the behaviour's
            last_values, bootstrap = self._bootstrap_values(next_obs, tensors["actions"],
                                                            data["truncated"].reshape(t, n), values.dtype)
        behaviour_lp = data["log_prob"].reshape(t, n)
        target_lp = target_lp.reshape(t, n)
        out = vtrace(behaviour_lp, target_lp if p.vtrace else behaviour_lp, data["rewards"].reshape(t, n),
                     values, last_values, gamma=p.gamma,
                     terminated=data["terminated"].reshape(t, n), truncated=data["truncated"].reshape(t, n),
                     bootstrap_values=bootstrap, rho_bar=p.rho_bar, c_bar=p.c_bar, lambda_=p.gae_lambda)
        data["advantages"] = out.advantages.reshape(-1)  # weighted by rho after normalization (learn)
        data["rhos"] = out.clipped_rhos.reshape(-1)
        data["returns"] = out.vs.reshape(-1)
        data["target_lp"] = target_lp.reshape(-1)
        data["value"] = values.reshape(-1)  # clip_value's anchor: the learner's values now, as target_lp is
        ratio = (target_lp - behaviour_lp).exp()
        stats = {"stats/is_ratio_mean": ratio.mean().item(), "stats/is_ratio_max": ratio.max().item(),
                 "stats/rho_clip_fraction": (ratio > p.rho_bar * (1 + _ROUNDING)).float().mean().item(),
                 "stats/explained_variance": _explained_variance(values.reshape(-1), data["returns"])}
        return data, stats

    def _bootstrap_values(self, next_obs: torch.Tensor, actions: torch.Tensor, truncated: torch.Tensor,
                          dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """``(last_values [N], bootstrap_values [T, N])`` under the learner's value function.

        Values of the observation after step ``T-1`` and of the true final observation of every truncated step
        (0 elsewhere).
        """
        t, n = truncated.shape
        rows, cols = torch.nonzero(truncated, as_tuple=True)
        rows = torch.cat([rows, torch.full((n,), t - 1, dtype=rows.dtype, device=rows.device)])
        cols = torch.cat([cols, torch.arange(n, dtype=cols.dtype, device=cols.device)])
        obs, acts = self.on_device({"obs": next_obs[rows.cpu(), cols.cpu()],
                                    "actions": actions[rows.cpu(), cols.cpu()]}).values()
        with torch.no_grad():  # _evaluate's values; the actions only fill its signature
            _, _, v = self._evaluate(obs, acts)
        v = v.to(dtype)
        k = len(rows) - n
        bootstrap = torch.zeros((t, n), dtype=dtype, device=v.device)
        bootstrap[rows[:k].to(v.device), cols[:k].to(v.device)] = v[:k]
        return v[k:], bootstrap

    def learn(self, buffer: Any, *, progress: float = 0.0) -> dict[str, float]:
        """V-trace targets with the current weights, then ``epochs`` passes of minibatch updates."""
        if self.optimizer is None:
            raise RuntimeError("learn() called on a rollout copy of appo")
        p = self.params
        lr = apply_lr(self.optimizer, p, progress)
        # targets: V-trace over the whole rollout, with the learner's weights as they are now
        data, stats = self._targets(buffer)
        total = data["rewards"].shape[0]
        guard = guard_of(self)  # NaN/inf in a loss or gradient: raise or skip (policy.nan_policy)
        guard.begin_learn()
        low, high = 1 - p.clip_ratio, 1 + p.clip_ratio
        diagnostics: list[torch.Tensor] = []  # per minibatch: policy loss, value loss, entropy, approx-KL
        epochs_done = 0
        for _ in range(p.epochs):
            epoch_start = len(diagnostics)
            # update: shuffled minibatches of the rollout
            perm = torch.randperm(total, generator=self.generator).to(data["rewards"].device)
            for start in range(0, total, p.minibatch_size):
                idx = perm[start: start + p.minibatch_size]
                mb = {k: v[idx] for k, v in data.items()}
                logp, entropy_fn, value = self._evaluate(mb["obs"], mb["actions"])
                adv = pg_advantages(mb["advantages"], mb["rhos"], normalize=p.normalize_advantages)
                log_ratio = logp - mb["target_lp"]
                ratio = log_ratio.exp()
                if p.clip:
                    pg_loss = -torch.min(adv * ratio, adv * ratio.clamp(low, high)).mean()
                else:
                    pg_loss = -(adv * logp).mean()
                v_loss = value_loss(value, mb["returns"], mb["value"], p.clip_value)
                entropy = entropy_fn()
                loss = pg_loss + p.vf_coef * v_loss - p.ent_coef * entropy
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = guard.grad_norm(self._params, p.max_grad_norm)
                if not guard.check({"loss/policy": pg_loss, "loss/value": v_loss}, grad_norm, where="appo update",
                                   optimizers=[self.optimizer]):
                    continue
                self.optimizer.step()
                with torch.no_grad():
                    kl = ((ratio - 1) - log_ratio).mean()
                    diagnostics.append(torch.stack([pg_loss.detach(), v_loss.detach(), entropy.detach(), kl]))
            epochs_done += 1
            if p.target_kl is not None and len(diagnostics) > epoch_start:
                epoch_kl = torch.stack(diagnostics[epoch_start:])[:, 3].mean().item()
                if self.all_reduce_mean(epoch_kl) > p.target_kl:
                    break
        # log: the last epoch's means
        names = ("loss/policy", "loss/value", "loss/entropy", "stats/approx_kl")
        last = diagnostics[epoch_start:] or diagnostics
        means = torch.stack(last).mean(0).tolist() if last else [0.0] * len(names)
        metrics = dict(zip(names, means, strict=True))
        metrics.update(stats)
        metrics["stats/lr"] = lr
        metrics["stats/epochs"] = float(epochs_done)
        metrics.update(guard.metrics())
        self.weight_version += 1
        if p.learner_delay_s > 0:  # benchmark knob (0 by default): emulate a slow learner
            time.sleep(p.learner_delay_s)
        return metrics


def pg_advantages(advantages: torch.Tensor, rhos: torch.Tensor, *, normalize: bool) -> torch.Tensor:
    """A minibatch's policy-gradient advantages: ``rhos * advantages``, normalized first if ``normalize``.

    Normalizing after the weighting would give a step whose truncated ratio is near 0 (an action the learner has
    moved away from) the minibatch's shifted mean as its advantage, pushing every such action down whatever its
    return; normalized first, its weight stays near 0 as V-trace intends.
    """
    if normalize and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    return rhos * advantages


_warned_stale = False


def _next_obs(buffer: Any) -> torch.Tensor | None:
    """The buffer's ``next_obs`` ``[T, N, ...]`` (``appo_rollout``), or ``None`` with a one-time warning."""
    global _warned_stale
    tensors = getattr(buffer, "tensors", None)
    if isinstance(tensors, dict) and "next_obs" in tensors:
        return tensors["next_obs"]
    if not _warned_stale:
        _warned_stale = True
        _log.warning("appo: the %s buffer keeps no next observations, so the bootstrap values (end of rollout, "
                     "time-limit truncations) are the behaviour policy's; set buffer.type: appo_rollout to "
                     "compute them with the learner's weights", type(buffer).__name__)
    return None
