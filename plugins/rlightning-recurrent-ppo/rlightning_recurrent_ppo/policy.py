"""Recurrent PPO: PPO's clipped surrogate over GAE-lambda advantages, with an LSTM/GRU core and truncated BPTT.

The state of each env is the caller's (``BasePolicy.initial_state``): the env runner keeps one row per env, passes
it to :meth:`RecurrentPPOPolicy.act`, takes the next rows from ``PolicyOutput.state`` and zeroes the rows of envs
whose episode ended. :meth:`act` also returns the row it was given as the extra ``core_state``, so every chunk (and
the rollout buffer) holds the state each step started from. :meth:`learn` cuts every env's ``T`` steps into
sequences of ``seq_len``, shuffles whole sequences into minibatches, and replays each from the state stored at its
first step, zeroing the state before every step that starts an episode (the step after a terminated or truncated
one) exactly as the runner did. Before any update the replay reproduces the rollout's log-probabilities and values.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from rlightning_ppo.losses import value_loss
from rlightning_ppo.networks import gaussian_entropy, gaussian_log_prob
from rlightning_ppo.policy import ActorCriticState, _adam, _AdvantageNorm, learn_metrics
from rlightning_ppo.spaces import space_info

from rlightning_core.errors import UserError
from rlightning_core.policy.base import BasePolicy, PolicyOutput, PolicyRole
from rlightning_core.policy.numerics import guard_of
from rlightning_recurrent_ppo.networks import RecurrentActorCritic
from rlightning_recurrent_ppo.params import RecurrentPPOParams

_STORED = ("obs", "actions", "log_prob", "value", "advantages", "returns")


class RecurrentPPOPolicy(ActorCriticState, BasePolicy):
    """Recurrent actor-critic trained with PPO. Extras stored per step: ``log_prob``, ``value``, ``core_state``."""

    default_buffer = "rollout"

    def __init__(self, params: RecurrentPPOParams, *, observation_space: Any, action_space: Any,
                 role: PolicyRole = PolicyRole.LEARNER, device: str = "cpu", seed: int = 0) -> None:
        super().__init__(params, observation_space=observation_space, action_space=action_space, role=role,
                         device=device, seed=seed)
        from rlightning_core.spaces import refuse_flat_dict

        refuse_flat_dict(observation_space, "recurrent_ppo")
        obs_dim, act_dim, self.discrete = space_info(observation_space, action_space, "recurrent_ppo")
        if params.encoder == "cnn":
            raise UserError("policy.params.encoder: recurrent_ppo has the MLP encoder only ('auto' or 'mlp'), "
                              "got 'cnn'")
        if params.minibatch_size % params.seq_len:
            raise UserError(f"policy.params.minibatch_size ({params.minibatch_size}) must be a multiple of "
                              f"policy.params.seq_len ({params.seq_len}): recurrent_ppo's minibatches are whole "
                              "sequences")
        torch.manual_seed(seed)  # parameter initialization is a function of the seed alone
        self.net = RecurrentActorCritic(
            obs_dim, act_dim, discrete=self.discrete, hidden_sizes=list(params.hidden_sizes),
            activation=params.activation, core=params.core, hidden_size=params.hidden_size,
            head_sizes=list(params.head_sizes), shared_core=params.shared_core, ortho=params.ortho_init,
            log_std_init=params.log_std_init).to(device)
        self.state_size = self.net.state_size
        #: Per instance: the ``core_state`` row's width depends on the params.
        self.extras_spec = {"log_prob": ((), np.float32), "value": ((), np.float32),
                            "core_state": ((self.state_size,), np.float32)}
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
    def initial_state(self, num_envs: int) -> np.ndarray:
        """Zero core states, one row per env (an episode start)."""
        return np.zeros((num_envs, self.state_size), np.float32)

    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        x = torch.as_tensor(np.asarray(obs), dtype=torch.float32, device=self.device)
        return x.reshape(x.shape[0], -1)

    def _state(self, state: np.ndarray | None, n: int) -> torch.Tensor:
        if state is None:
            return torch.zeros((n, self.state_size), dtype=torch.float32, device=self.device)
        return torch.as_tensor(np.asarray(state, dtype=np.float32), device=self.device)

    def act(self, obs: np.ndarray, *, deterministic: bool = False, state: np.ndarray | None = None) -> PolicyOutput:
        """Actions of a batch from its core states (``None``: episode starts); the next states in ``.state``."""
        n = len(obs)
        given = self.initial_state(n) if state is None else np.asarray(state, dtype=np.float32)
        with self._no_grad():
            out, value, new = self.net.step(self._obs(obs), self._state(given, n))
            out, value, new = out.float().cpu(), value.float().cpu(), new.float().cpu()
            if self.discrete:
                logp_all = torch.log_softmax(out, -1)
                if deterministic:
                    actions = out.argmax(-1)
                else:
                    actions = torch.multinomial(logp_all.exp(), 1, generator=self.generator).squeeze(-1)
                logp = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
                env_actions = None
            else:
                log_std = self.net.log_std.float().cpu()
                noise = None if deterministic else torch.randn(out.shape, generator=self.generator)
                actions = out if noise is None else out + noise * log_std.exp()
                logp = gaussian_log_prob(actions, out, log_std)
                env_actions = torch.clamp(actions, self.low, self.high).numpy()
        return PolicyOutput(actions=actions.numpy(), env_actions=env_actions, state=new.numpy(),
                            extras={"log_prob": logp.numpy(), "value": value.numpy(), "core_state": given})

    def value(self, obs: np.ndarray, state: np.ndarray | None = None) -> np.ndarray:
        """State values of a batch from its core states (bootstrapping truncated episodes and rollout ends)."""
        with self._no_grad():
            return self.net.value(self._obs(obs), self._state(state, len(obs))).float().cpu().numpy()

    def export_module(self) -> torch.nn.Module:
        """Refused: the exported graph maps observations to actions, with no input for the core state."""
        raise UserError("policy recurrent_ppo (rlightning-recurrent-ppo) cannot be exported: its actions depend on "
                        "a per-env core state that the exported obs -> action graph has no input for; act from "
                        "Python with act(obs, state=...) and PolicyOutput.state")

    # -- training --------------------------------------------------------------------------------------------
    def sequences(self, buffer: Any) -> dict[str, torch.Tensor]:
        """The rollout as ``[L, M]`` sequences (``M = T / seq_len * N``), their first states and reset masks.

        Keys: every stored field ``[L, M, ...]``, ``starts`` (``[L, M]``: the step begins an episode) and
        ``state0`` (``[M, S]``: the stored core state at each sequence's first step).
        """
        length = int(self.params.seq_len)
        t, n = buffer["rewards"].shape
        if t % length:
            raise UserError(f"policy.params.seq_len ({length}) must divide engine.params.rollout_steps ({t}): "
                              "recurrent_ppo cuts each env's rollout into whole sequences")
        blocks = t // length

        def seq(x: torch.Tensor) -> torch.Tensor:
            rest = x.shape[2:]
            return x.reshape(blocks, length, n, *rest).transpose(0, 1).reshape(length, blocks * n, *rest)

        out = {k: seq(buffer[k]) for k in _STORED}
        done = buffer["terminated"] | buffer["truncated"]
        starts = torch.zeros_like(done)
        starts[1:] = done[:-1]
        out["starts"] = seq(starts)
        out["state0"] = buffer["core_state"].reshape(blocks, length, n, -1)[:, 0].reshape(blocks * n, -1)
        return out

    def _minibatches(self, seqs: dict[str, torch.Tensor]) -> Iterator[dict[str, torch.Tensor]]:
        """Shuffled minibatches of whole sequences (all of them at once when one minibatch covers the rollout)."""
        m = seqs["state0"].shape[0]
        per = max(1, self.params.minibatch_size // self.params.seq_len)
        if per >= m:
            yield seqs
            return
        perm = torch.randperm(m, generator=self.generator).to(seqs["state0"].device)
        for start in range(0, m, per):
            idx = perm[start:start + per]
            yield {k: v.index_select(1 if k != "state0" else 0, idx) for k, v in seqs.items()}

    def _evaluate(self, mb: dict[str, torch.Tensor]
                  ) -> tuple[torch.Tensor, Callable[[], torch.Tensor], torch.Tensor]:
        """Log-probs of the minibatch's actions, a function giving the mean entropy, and values (``[L * B]``)."""
        obs = mb["obs"]
        out, value = self.net.unroll(obs.reshape(*obs.shape[:2], -1).float(), mb["state0"], mb["starts"])
        actions = mb["actions"].reshape(out.shape[0], *mb["actions"].shape[2:])
        if self.discrete:
            logp_all = torch.log_softmax(out, -1)
            logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            return logp, lambda: -(logp_all.exp() * logp_all).sum(-1).mean(), value
        log_std = self.net.log_std
        return gaussian_log_prob(actions, out, log_std), lambda: gaussian_entropy(log_std), value

    def replay(self, buffer: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probs and values of the stored rollout replayed in sequences, ``[L, M]`` (for checks)."""
        seqs = self.sequences(buffer)
        with torch.no_grad():
            logp, _, value = self._evaluate(self.on_device(seqs))
        shape = seqs["starts"].shape
        return logp.reshape(shape).cpu(), value.reshape(shape).cpu()

    def learn(self, buffer: Any, *, progress: float = 0.0) -> dict[str, float]:
        """GAE, then ``epochs`` passes of clipped-surrogate updates over minibatches of whole sequences.

        Diagnostics are averaged over the minibatches of the last epoch that ran, as in ``ppo``.
        """
        if self.optimizer is None:
            raise RuntimeError("learn() called on a rollout copy of recurrent_ppo")
        p = self.params
        lr = p.lr * max(0.0, 1.0 - progress) if p.anneal_lr else p.lr
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        buffer.compute_returns_and_advantages(gamma=p.gamma, gae_lambda=p.gae_lambda)
        seqs = self.on_device(self.sequences(buffer))
        guard = guard_of(self)
        guard.begin_learn()
        norm_cache = _AdvantageNorm()
        diagnostics: list[torch.Tensor] = []
        epochs_done = 0
        epoch_start = 0
        low, high = 1 - p.clip_ratio, 1 + p.clip_ratio
        for _ in range(p.epochs):
            epoch_start = len(diagnostics)
            for mb in self._minibatches(seqs):
                logp, entropy_fn, value = self._evaluate(mb)
                log_ratio = logp - mb["log_prob"].reshape(-1)
                ratio = log_ratio.exp()
                adv = mb["advantages"].reshape(-1)
                if p.normalize_advantages and adv.numel() > 1:
                    adv = norm_cache.normalized(adv)
                pg_loss = -torch.min(adv * ratio, adv * ratio.clamp(low, high)).mean()
                v_loss = value_loss(value, mb["returns"].reshape(-1), mb["value"].reshape(-1), p.clip_value)
                loss = pg_loss + p.vf_coef * v_loss
                if p.ent_coef > 0:
                    entropy = entropy_fn()
                    loss = loss - p.ent_coef * entropy
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = guard.grad_norm(self._params, p.max_grad_norm)
                if not guard.check({"loss/policy": pg_loss, "loss/value": v_loss}, grad_norm,
                                   where="recurrent_ppo update", optimizers=[self.optimizer]):
                    continue
                self.optimizer.step()
                if p.target_kl is not None or epochs_done == p.epochs - 1:
                    with torch.no_grad():
                        ent = entropy.detach() if p.ent_coef > 0 else entropy_fn()
                        kl = ((ratio - 1) - log_ratio).mean()
                        clip_frac = ((ratio - 1).abs() > p.clip_ratio).float().mean()
                        diagnostics.append(torch.stack([pg_loss.detach(), v_loss.detach(), ent, kl, clip_frac]))
            epochs_done += 1
            if p.target_kl is not None and len(diagnostics) > epoch_start:
                epoch_kl = torch.stack(diagnostics[epoch_start:])[:, 3].mean()
                if self.all_reduce_mean(epoch_kl.item()) > p.target_kl:
                    break
        metrics = learn_metrics(diagnostics, epoch_start, values=seqs["value"].reshape(-1),
                                returns=seqs["returns"].reshape(-1), lr=lr, epochs_done=epochs_done, guard=guard)
        self.weight_version += 1
        return metrics
