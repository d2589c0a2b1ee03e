"""PPO (Schulman et al., 2017): clipped surrogate objective over GAE-lambda advantages.

One class serves both roles: a rollout copy (``ROLLOUT``) only runs :meth:`PPOPolicy.act`; a learner (``LEARNER``)
also owns the Adam optimizer and runs :meth:`PPOPolicy.learn` over a ``RolloutBuffer``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rlightning_core.buffer.storage import as_tensor
from rlightning_core.policy.base import BasePolicy, PolicyOutput, PolicyRole
from rlightning_core.policy.encoders import encoder_kind
from rlightning_core.policy.numerics import guard_of
from rlightning_ppo.losses import apply_lr, value_loss
from rlightning_ppo.networks import (
    MASKED_LOGIT,
    ActorCritic,
    CNNActorCritic,
    DictActorCritic,
    NumpyForward,
    bernoulli_log_prob,
    gaussian_entropy,
    gaussian_log_prob,
    gaussian_log_prob_np,
    mask_logits,
    multi_categorical_log_prob,
)
from rlightning_ppo.params import PPOParams
from rlightning_ppo.spaces import ActionSpec, action_spec, check_action_mask, check_observation_space


def _adam(parameters: Any, params: PPOParams) -> torch.optim.Optimizer:
    """Adam with the fused kernel where torch has one (one kernel per step instead of ~10 per tensor)."""
    parameters = list(parameters)
    try:
        return torch.optim.Adam(parameters, lr=params.lr, eps=params.adam_eps, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(parameters, lr=params.lr, eps=params.adam_eps, foreach=True)


def _explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """1 - Var[returns - values] / Var[returns]: 1 is a perfect critic, <= 0 no better than a constant."""
    var = returns.var().item()
    return float("nan") if var == 0 else 1.0 - (returns - values).var().item() / var


#: The diagnostics a PPO learn call logs, in the order each minibatch stacks them.
DIAGNOSTICS = ("loss/policy", "loss/value", "loss/entropy", "stats/approx_kl", "stats/clip_fraction")


def learn_metrics(diagnostics: list[torch.Tensor], epoch_start: int, *, values: torch.Tensor,
                  returns: torch.Tensor, lr: float, epochs_done: int, guard: Any) -> dict[str, float]:
    """A learn call's metrics: :data:`DIAGNOSTICS` averaged over the epoch that ran last, and more.

    The epoch that ran last includes an early stop on ``target_kl``; the rest are the critic's explained variance
    (``values`` against ``returns``), the learning rate, the epochs run and the NaN guard's counts.
    """
    last = diagnostics[epoch_start:] or diagnostics
    means = torch.stack(last).mean(0).tolist() if last else [0.0] * len(DIAGNOSTICS)
    metrics = dict(zip(DIAGNOSTICS, means, strict=True))
    metrics["stats/explained_variance"] = _explained_variance(values, returns)
    metrics["stats/lr"] = lr
    metrics["stats/epochs"] = float(epochs_done)
    metrics.update(guard.metrics())
    return metrics


class ActorCriticState:
    """The checkpointed parts of an actor-critic policy: ``net``, its Adam ``optimizer`` and its ``generator``.

    ``optimizer`` is ``None`` on a rollout copy; ``generator`` (CPU) draws the samples and the shuffles.
    """

    net: torch.nn.Module
    optimizer: torch.optim.Optimizer | None
    generator: torch.Generator

    def modules(self) -> dict[str, Any]:
        """The actor-critic network."""
        return {"net": self.net}

    def optimizers(self) -> dict[str, Any]:
        """Adam (learners only)."""
        return {"adam": self.optimizer} if self.optimizer is not None else {}

    def extra_state(self) -> dict[str, Any]:
        """The sampling / shuffling generator, so a resumed run draws the same numbers."""
        return {"generator": self.generator.get_state()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore the generator."""
        if "generator" in state:
            self.generator.set_state(state["generator"])


class _AdvantageNorm:
    """Per-minibatch advantage normalization, computed once when every epoch reads the same minibatch.

    When one minibatch covers the whole rollout, each epoch gets a view of the same storage; the normalized
    copy of the previous epoch is reused if the view has the same address, shape and strides and the
    storage's version counter (shared by all its views, bumped by every in-place write) has not moved since.
    Holding a reference to the source keeps its memory from being reused by another tensor, so an equal
    address means the same storage.
    """

    def __init__(self) -> None:
        self.source: torch.Tensor | None = None
        self.version = -1
        self.value: torch.Tensor | None = None

    def normalized(self, adv: torch.Tensor) -> torch.Tensor:
        """``(adv - mean) / (std + 1e-8)``, reused while ``adv`` is the same unchanged view."""
        src = self.source
        if (src is not None and self.value is not None and adv.data_ptr() == src.data_ptr()
                and adv.shape == src.shape and adv.stride() == src.stride() and adv._version == self.version):
            return self.value
        self.source, self.version = adv, adv._version
        self.value = (adv - adv.mean()) / (adv.std() + 1e-8)
        return self.value


class _Deterministic(torch.nn.Module):
    """Observations -> deterministic env actions: the mode of the action distribution, as ``act`` sends it.

    Categorical kinds: the argmax per dimension plus the space's ``start`` (illegal actions masked out where the
    observations carry an ``action_mask``); MultiBinary: the bits whose logit is positive (probability above
    1/2); Box: the mean clipped to the action box.
    """

    def __init__(self, net: ActorCritic | CNNActorCritic | DictActorCritic, spec: ActionSpec,
                 low: torch.Tensor | None, high: torch.Tensor | None, mask_cols: slice | None = None) -> None:
        super().__init__()
        self.net, self.kind, self.nvec, self.mask_cols = net, spec.kind, list(spec.nvec), mask_cols
        self.flatten = not isinstance(net, CNNActorCritic)
        if spec.start:
            self.register_buffer("start", torch.tensor(spec.start, dtype=torch.int64))
        if spec.kind == "gaussian":
            self.register_buffer("low", low.clone())
            self.register_buffer("high", high.clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions of a float32 batch (images in pixel units, [0, 255])."""
        out, _ = self.net(obs.reshape(obs.shape[0], -1) if self.flatten else obs)
        if self.kind == "categorical":
            if self.mask_cols is not None:
                out = mask_logits(out, obs.reshape(obs.shape[0], -1)[:, self.mask_cols] > 0.5)
            return out.argmax(-1) + self.start[0]
        if self.kind == "multi_categorical":
            return torch.stack([x.argmax(-1) for x in out.split(self.nvec, -1)], -1) + self.start
        if self.kind == "bernoulli":
            return (out > 0).long()
        return torch.minimum(torch.maximum(out, self.low), self.high)


class PPOPolicy(ActorCriticState, BasePolicy):
    """PPO actor-critic. Extras stored per step: ``log_prob`` and ``value``."""

    default_buffer = "rollout"
    extras_spec = {"log_prob": ((), np.float32), "value": ((), np.float32)}
    #: The name space errors give (subclasses registered under another name override it).
    _plugin_name = "ppo"

    def __init__(self, params: PPOParams, *, observation_space: Any, action_space: Any,
                 role: PolicyRole = PolicyRole.LEARNER, device: str = "cpu", seed: int = 0) -> None:
        super().__init__(params, observation_space=observation_space, action_space=action_space, role=role,
                         device=device, seed=seed)
        self.action_spec = action_spec(action_space, self._plugin_name)
        check_action_mask(observation_space, action_space, self._plugin_name)
        obs_dim, act_dim, self.discrete = (check_observation_space(observation_space, self._plugin_name),
                                           self.action_spec.out_dim, self.action_spec.discrete)
        #: Discrete / MultiDiscrete ``start``, added to the sampled indices for the env (None: all zero).
        self._start = np.asarray(self.action_spec.start, np.int64) if any(self.action_spec.start) else None
        self.obs_shape = tuple(observation_space.shape)
        #: Images: observations keep their dtype (uint8) up to the CNN, which scales them on the device.
        self.image = encoder_kind(observation_space, params.encoder) == "cnn"
        from rlightning_core.spaces import ACTION_MASK, FlatDict

        flat_dict = isinstance(observation_space, FlatDict)
        #: Columns of the legal-action mask in the flat observations (``None``: no masking).
        self.mask_cols = observation_space.columns(ACTION_MASK) if flat_dict and observation_space.has_action_mask \
            else None
        torch.manual_seed(seed)  # parameter initialization is a function of the seed alone
        if flat_dict:
            self.image = False
            self.net: ActorCritic | CNNActorCritic | DictActorCritic = DictActorCritic(
                observation_space, act_dim, discrete=self.discrete, hidden_sizes=list(params.hidden_sizes),
                activation=params.activation, features=params.cnn_features, ortho=params.ortho_init,
                log_std_init=params.log_std_init).to(device)
        elif self.image:
            self.net = CNNActorCritic(
                self.obs_shape, act_dim, discrete=self.discrete, features=params.cnn_features,
                ortho=params.ortho_init, log_std_init=params.log_std_init).to(device)
        else:
            self.net = ActorCritic(obs_dim, act_dim, discrete=self.discrete, hidden_sizes=list(params.hidden_sizes),
                                   activation=params.activation, shared=params.shared_network,
                                   ortho=params.ortho_init, log_std_init=params.log_std_init).to(device)
        self.generator = torch.Generator(device="cpu").manual_seed(seed + 1)
        if not self.discrete:
            self.low = torch.as_tensor(action_space.low, dtype=torch.float32)
            self.high = torch.as_tensor(action_space.high, dtype=torch.float32)
            self._low_np, self._high_np = self.low.numpy(), self.high.numpy()
        self._params = list(self.net.parameters())
        if role is PolicyRole.ROLLOUT:
            for param in self._params:
                param.requires_grad_(False)
        self._no_grad = contextlib.nullcontext if role is PolicyRole.ROLLOUT else torch.inference_mode
        self.optimizer = _adam(self._params, params) if role is PolicyRole.LEARNER else None
        self._noise: torch.Tensor | None = None  # see _standard_normal
        self._noise_np = np.empty(0, np.float32)
        #: ``act`` through numpy on views of the parameters (``numpy_act``; flat MLPs on a CPU), else ``None``.
        self._np_forward = NumpyForward(self.net, params.activation) if (
            params.numpy_act and device == "cpu" and NumpyForward.supports(self.net, params.activation)) else None

    # -- rollout ---------------------------------------------------------------------------------------------
    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        if self.image:  # stays uint8 up to the device; the CNN converts it there
            return as_tensor(obs).to(self.device)
        if self.device == "cpu" and isinstance(obs, np.ndarray) and obs.dtype == np.float32 and obs.flags.writeable:
            x = torch.from_numpy(obs)  # no copy on the per-step path
        else:
            x = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
        return x.reshape(x.shape[0], -1) if x.dim() > 2 else x

    def act(self, obs: np.ndarray, *, deterministic: bool = False) -> PolicyOutput:
        """Sample (or, deterministic, take the mode of) actions for a batch; returns log-probs and values."""
        if self._np_forward is not None:
            x = np.asarray(obs, dtype=np.float32)
            out, value = self._np_forward(x.reshape(len(x), -1))
            log_std = self._np_forward.log_std
        else:
            # a rollout copy's parameters need no gradients, so it builds no graph without entering a grad mode
            with self._no_grad():
                out_t, value_t = self.net(self._obs(obs))
                # sampled on the host: the same generator and code for every device
                out, value = out_t.float().cpu().numpy(), value_t.float().cpu().numpy()
                log_std = None if self.discrete else self.net.log_std.detach().float().cpu().numpy()
        if self.discrete:
            return self._act_discrete(out, value, deterministic, self._mask_np(obs))
        actions = out if deterministic else out + self._standard_normal(out.shape) * np.exp(log_std)
        logp = gaussian_log_prob_np(actions, out, log_std)
        return PolicyOutput(actions=actions, extras={"log_prob": logp, "value": value},
                            env_actions=np.minimum(np.maximum(actions, self._low_np), self._high_np))

    def _standard_normal(self, shape: tuple[int, ...]) -> np.ndarray:
        """Standard normal draws from the policy's generator, the numbers ``torch.randn`` would give.

        Drawn into a tensor kept for the batch shape (one op instead of an allocation and a draw); the returned
        array is its view, valid until the next call.
        """
        if self._noise is None or self._noise.shape != shape:
            self._noise = torch.empty(shape)
            self._noise_np = self._noise.numpy()
        self._noise.normal_(generator=self.generator)
        return self._noise_np

    def _mask_np(self, obs: np.ndarray) -> np.ndarray | None:
        """The legal-action mask of a batch (bool ``[B, n]``), or ``None`` without masking.

        Raises:
            ValueError: an observation allows no action at all.
        """
        if self.mask_cols is None:
            return None
        mask = np.asarray(obs).reshape(len(obs), -1)[:, self.mask_cols] > 0.5
        if not mask.any(-1).all():
            raise ValueError(f"ppo: an observation's action_mask allows no action (rows "
                             f"{np.flatnonzero(~mask.any(-1)).tolist()}); an env must leave one action legal")
        return mask

    def _act_discrete(self, logits: np.ndarray, value: np.ndarray, deterministic: bool,
                      mask: np.ndarray | None = None) -> PolicyOutput:
        """Sample categorical (masked where ``mask`` is given), factorised categorical or Bernoulli actions (CPU).

        The buffer gets the indices (``0 .. n - 1``) and the env ``start + index`` where the space has a start.
        """
        kind = self.action_spec.kind
        if kind == "bernoulli":
            actions, logp = self._sample_bernoulli(logits, deterministic)
        elif kind == "categorical":
            actions, logp = self._sample_categorical(logits, deterministic, mask=mask)
        else:
            z = logits
            nvec = self.action_spec.nvec
            u = None if deterministic else torch.rand((z.shape[0], len(nvec)), generator=self.generator).numpy()
            bounds = np.cumsum((0, *nvec))
            cols, logps = [], []
            for d in range(len(nvec)):
                a, lp = self._sample_categorical(z[:, bounds[d] : bounds[d + 1]], deterministic,
                                                 None if u is None else u[:, d : d + 1])
                cols.append(a)
                logps.append(lp)
            actions, logp = np.stack(cols, -1), np.sum(logps, 0)
        env_actions = None if self._start is None else actions + (self._start if actions.ndim > 1 else self._start[0])
        return PolicyOutput(actions=actions, extras={"log_prob": logp.astype(np.float32, copy=False),
                                                     "value": value}, env_actions=env_actions)

    def _sample_categorical(self, z: np.ndarray, deterministic: bool, u: np.ndarray | None = None,
                            mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Indices and log-probabilities of a small batch of categorical draws from logits ``z`` ``[B, n]``.

        The inverse-CDF draw takes one uniform per row from the policy's torch generator (or ``u``), so runs stay
        reproducible from the seed and checkpoints keep one generator. For the batches of rollouts (a few envs)
        this costs ~15 us against ~65 us for ``log_softmax`` + ``multinomial`` + ``gather`` in torch, whose
        per-op overhead dominates at this size; the log-probabilities equal torch's to float32 rounding.
        """
        if mask is not None:  # illegal actions get probability exactly 0 (exp underflows)
            z = np.where(mask, z, np.float32(MASKED_LOGIT))
        z = z - z.max(-1, keepdims=True)
        cdf = np.exp(z).cumsum(-1)
        total = cdf[:, -1:]  # the sum as the CDF computes it, so the last bin always catches u * total
        logp_all = z - np.log(total)
        if deterministic:
            actions = z.argmax(-1)
        else:
            if u is None:
                u = torch.rand((z.shape[0], 1), generator=self.generator).numpy()
            actions = (cdf > u * total).argmax(-1)
        return actions.astype(np.int64, copy=False), logp_all[np.arange(len(actions)), actions]

    def _sample_bernoulli(self, logits_np: np.ndarray, deterministic: bool) -> tuple[np.ndarray, np.ndarray]:
        """Bits (``P(1) = sigmoid(logit)``; deterministic: logit > 0) and their summed log-probabilities."""
        logits = torch.from_numpy(logits_np)
        if deterministic:
            bits = logits > 0
        else:
            bits = torch.rand(logits.shape, generator=self.generator) < torch.sigmoid(logits)
        logp, _ = bernoulli_log_prob(logits, bits)
        return bits.numpy().astype(np.int64), logp.numpy()

    def export_module(self) -> torch.nn.Module:
        """What ``act(obs, deterministic=True)`` sends to the envs, as a module (for ``rlightning export``)."""
        return _Deterministic(self.net, self.action_spec, getattr(self, "low", None), getattr(self, "high", None),
                              self.mask_cols)

    def value(self, obs: np.ndarray) -> np.ndarray:
        """State values, for bootstrapping truncated episodes and the end of a rollout."""
        with self._no_grad():
            return self.net.value(self._obs(obs)).cpu().numpy()

    # -- training --------------------------------------------------------------------------------------------
    def _evaluate(self, obs: torch.Tensor, actions: torch.Tensor
                  ) -> tuple[torch.Tensor, Callable[[], torch.Tensor], torch.Tensor]:
        """Log-probs of ``actions``, a function giving the mean entropy, and values."""
        # the MLP takes float32 (a no-op for float32 storage; uint8 images under encoder: mlp are cast here)
        out, value = self.net(obs if self.image else obs.reshape(obs.shape[0], -1).float())
        kind = self.action_spec.kind
        if kind == "multi_categorical":
            logp, entropy_fn = multi_categorical_log_prob(out, actions, self.action_spec.nvec)
            return logp, entropy_fn, value
        if kind == "bernoulli":
            logp, entropy_fn = bernoulli_log_prob(out, actions)
            return logp, entropy_fn, value
        if kind == "categorical":
            if self.mask_cols is not None:  # the masked distribution, recomputed from the stored observations
                out = mask_logits(out, obs.reshape(obs.shape[0], -1)[:, self.mask_cols] > 0.5)
            logp_all = torch.log_softmax(out, -1)
            logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            return logp, lambda: -(logp_all.exp() * logp_all).sum(-1).mean(), value
        log_std = self.net.log_std
        return gaussian_log_prob(actions, out, log_std), lambda: gaussian_entropy(log_std), value

    def learn(self, buffer: Any, *, progress: float = 0.0) -> dict[str, float]:
        """Compute GAE, then ``epochs`` passes of clipped-surrogate minibatch updates.

        Diagnostics (losses, entropy, approx-KL, clip fraction) are averaged over the minibatches of the last
        epoch that ran, and stay tensors until the end (one host sync per call); they are computed every epoch
        only when ``target_kl`` needs the KL. The entropy enters the graph only when it is part of the loss.
        """
        if self.optimizer is None:
            raise RuntimeError("learn() called on a rollout copy of ppo")
        p = self.params
        lr = apply_lr(self.optimizer, p, progress)
        buffer.compute_returns_and_advantages(gamma=p.gamma, gae_lambda=p.gae_lambda)
        guard = guard_of(self)  # NaN/inf in a loss or gradient: raise or skip (policy.nan_policy)
        optimizer = self.optimizer
        norm_cache = _AdvantageNorm()
        guard.begin_learn()
        diagnostics: list[torch.Tensor] = []  # per minibatch: policy loss, value loss, entropy, approx-KL, clip frac
        epochs_done = 0
        seen_values: list[torch.Tensor] = []
        seen_returns: list[torch.Tensor] = []
        low, high = 1 - p.clip_ratio, 1 + p.clip_ratio
        for _ in range(p.epochs):
            epoch_start = len(diagnostics)
            for mb in buffer.minibatches(p.minibatch_size, generator=self.generator):
                mb = self.on_device(mb)
                if epochs_done == 0:
                    seen_values.append(mb["value"])
                    seen_returns.append(mb["returns"])
                logp, entropy_fn, value = self._evaluate(mb["obs"], mb["actions"])
                log_ratio = logp - mb["log_prob"]
                ratio = log_ratio.exp()
                adv = mb["advantages"]
                if p.normalize_advantages and adv.numel() > 1:
                    adv = norm_cache.normalized(adv)
                # -min(a, b) == max(-a, -b) exactly; one negation fewer than the textbook form
                pg_loss = -torch.min(adv * ratio, adv * ratio.clamp(low, high)).mean()
                v_loss = value_loss(value, mb["returns"], mb["value"], p.clip_value)
                loss = pg_loss + p.vf_coef * v_loss
                if p.ent_coef > 0:
                    entropy = entropy_fn()
                    loss = loss - p.ent_coef * entropy
                for param in self._params:  # zero_grad(set_to_none=True) without its wrappers (~40 us a call)
                    param.grad = None
                loss.backward()
                grad_norm = guard.grad_norm(self._params, p.max_grad_norm)
                if not guard.check({"loss/policy": pg_loss, "loss/value": v_loss}, grad_norm, where="ppo update",
                                   optimizers=[self.optimizer]):
                    continue
                optimizer.step()
                if p.target_kl is not None or epochs_done == p.epochs - 1:  # diagnostics: the last epoch
                    with torch.no_grad():
                        ent = entropy.detach() if p.ent_coef > 0 else entropy_fn()
                        kl = ((ratio - 1) - log_ratio).mean()
                        clip_frac = ((ratio - 1).abs() > p.clip_ratio).float().mean()
                        diagnostics.append(torch.stack([pg_loss.detach(), v_loss.detach(), ent, kl, clip_frac]))
            epochs_done += 1
            epoch_kl = (torch.stack(diagnostics[epoch_start:])[:, 3].mean()
                        if p.target_kl is not None and len(diagnostics) > epoch_start else None)
            if epoch_kl is not None and self.all_reduce_mean(epoch_kl.item()) > p.target_kl:
                break
        metrics = learn_metrics(diagnostics, epoch_start, values=torch.cat(seen_values),
                                returns=torch.cat(seen_returns), lr=lr, epochs_done=epochs_done, guard=guard)
        self.weight_version += 1
        return metrics
