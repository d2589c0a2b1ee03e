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
from rlightning_ppo.networks import ActorCritic, CNNActorCritic, gaussian_entropy, gaussian_log_prob
from rlightning_ppo.params import PPOParams
from rlightning_ppo.spaces import space_info


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
    """Observations -> deterministic env actions: the logits' argmax, or the mean clipped to the action box."""

    def __init__(self, net: ActorCritic | CNNActorCritic, discrete: bool, low: torch.Tensor | None,
                 high: torch.Tensor | None) -> None:
        super().__init__()
        self.net, self.discrete = net, discrete
        self.flatten = not isinstance(net, CNNActorCritic)
        if not discrete:
            self.register_buffer("low", low.clone())
            self.register_buffer("high", high.clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions of a float32 batch (images in pixel units, [0, 255])."""
        out, _ = self.net(obs.reshape(obs.shape[0], -1) if self.flatten else obs)
        if self.discrete:
            return out.argmax(-1)
        return torch.minimum(torch.maximum(out, self.low), self.high)


class PPOPolicy(BasePolicy):
    """PPO actor-critic. Extras stored per step: ``log_prob`` and ``value``."""

    default_buffer = "rollout"
    extras_spec = {"log_prob": ((), np.float32), "value": ((), np.float32)}

    def __init__(self, params: PPOParams, *, observation_space: Any, action_space: Any,
                 role: PolicyRole = PolicyRole.LEARNER, device: str = "cpu", seed: int = 0) -> None:
        super().__init__(params, observation_space=observation_space, action_space=action_space, role=role,
                         device=device, seed=seed)
        obs_dim, act_dim, self.discrete = space_info(observation_space, action_space)
        self.obs_shape = tuple(observation_space.shape)
        #: Images: observations keep their dtype (uint8) up to the CNN, which scales them on the device.
        self.image = encoder_kind(observation_space, params.encoder) == "cnn"
        torch.manual_seed(seed)  # parameter initialization is a function of the seed alone
        if self.image:
            self.net: ActorCritic | CNNActorCritic = CNNActorCritic(
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
        self._params = list(self.net.parameters())
        if role is PolicyRole.ROLLOUT:
            for param in self._params:
                param.requires_grad_(False)
        self._no_grad = contextlib.nullcontext if role is PolicyRole.ROLLOUT else torch.inference_mode
        self.optimizer = _adam(self._params, params) if role is PolicyRole.LEARNER else None

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
        # a rollout copy's parameters need no gradients, so it builds no graph without entering a grad mode
        with self._no_grad():
            out, value = self.net(self._obs(obs))
            log_std = None if self.discrete else self.net.log_std
            if self.device != "cpu":  # sample on the host: the same generator and code as a CPU copy
                out, value = out.float().cpu(), value.float().cpu()
                log_std = None if log_std is None else log_std.float().cpu()
            if self.discrete:
                return self._act_categorical(out, value, deterministic)
            if deterministic:
                actions = out
            else:
                noise = torch.randn(out.shape, generator=self.generator)
                actions = out + noise * log_std.exp()
            logp = gaussian_log_prob(actions, out, log_std)
            env_actions = torch.clamp(actions, self.low, self.high).numpy()
            return PolicyOutput(actions=actions.numpy(), extras={"log_prob": logp.numpy(), "value": value.numpy()},
                                env_actions=env_actions)

    def _act_categorical(self, logits: torch.Tensor, value: torch.Tensor, deterministic: bool) -> PolicyOutput:
        """Sample a small batch of categorical actions in numpy (CPU).

        The inverse-CDF draw takes one uniform per row from the policy's torch generator, so runs stay
        reproducible from the seed and checkpoints keep one generator. For the batches of rollouts (a few envs)
        this costs ~15 us against ~65 us for ``log_softmax`` + ``multinomial`` + ``gather`` in torch, whose
        per-op overhead dominates at this size; the log-probabilities equal torch's to float32 rounding.
        """
        z = logits.numpy()
        z = z - z.max(-1, keepdims=True)
        cdf = np.exp(z).cumsum(-1)
        total = cdf[:, -1:]  # the sum as the CDF computes it, so the last bin always catches u * total
        logp_all = z - np.log(total)
        if deterministic:
            actions = z.argmax(-1)
        else:
            u = torch.rand((z.shape[0], 1), generator=self.generator).numpy() * total
            actions = (cdf > u).argmax(-1)
        logp = logp_all[np.arange(len(actions)), actions]
        return PolicyOutput(actions=actions.astype(np.int64, copy=False),
                            extras={"log_prob": logp.astype(np.float32, copy=False), "value": value.numpy()})

    def export_module(self) -> torch.nn.Module:
        """What ``act(obs, deterministic=True)`` sends to the envs, as a module (for ``rlightning export``)."""
        return _Deterministic(self.net, self.discrete, getattr(self, "low", None), getattr(self, "high", None))

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
        if self.discrete:
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
                optimizer.zero_grad(set_to_none=True)
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
        names = ("loss/policy", "loss/value", "loss/entropy", "stats/approx_kl", "stats/clip_fraction")
        last = diagnostics[epoch_start:] or diagnostics  # the epoch that ran last (early stop included)
        means = torch.stack(last).mean(0).tolist() if last else [0.0] * len(names)
        metrics = dict(zip(names, means, strict=True))
        metrics["stats/explained_variance"] = _explained_variance(torch.cat(seen_values), torch.cat(seen_returns))
        metrics["stats/lr"] = lr
        metrics["stats/epochs"] = float(epochs_done)
        metrics.update(guard.metrics())
        self.weight_version += 1
        return metrics

    # -- state -----------------------------------------------------------------------------------------------
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
