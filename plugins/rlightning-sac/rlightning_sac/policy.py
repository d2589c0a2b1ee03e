r"""Soft Actor-Critic (Haarnoja et al., 2018, "Soft Actor-Critic Algorithms and Applications").

One class serves both roles: a rollout copy (``ROLLOUT``) only runs :meth:`SACPolicy.act`; a learner (``LEARNER``)
also owns the optimizers and runs :meth:`SACPolicy.learn` on a replay buffer. Per gradient update, in
Stable-Baselines3's order:

1. sample ``a~ = tanh(mu + sigma * eps)`` from the actor for the batch's observations;
2. entropy coefficient: :math:`L(\alpha) = -\log\alpha \, (\log\pi(a^\sim|s) + \bar{\mathcal{H}})`;
3. critics: :math:`y = r + d\,(1 - \text{term})\,(\min_k Q'_k(s', a') - \alpha \log\pi(a'|s'))` with
   :math:`a' \sim \pi(\cdot|s')` and target critics :math:`Q'`, where ``r`` is the buffer's (n-step) return and
   ``d`` its ``discount``; :math:`L(Q) = \tfrac12 \sum_k \mathbb{E}[w (Q_k(s, a) - y)^2]` with importance
   weights ``w`` (ones unless the buffer is prioritized);
4. actor: :math:`L(\pi) = \mathbb{E}[\alpha \log\pi(a^\sim|s) - \min_k Q_k(s, a^\sim)]` through the updated
   critics, whose weights are read as constants (no gradient is computed for them);
5. every ``target_update_interval`` updates: :math:`Q' \leftarrow (1-\tau) Q' + \tau Q`.

Actions live in ``[-1, 1]`` (what the buffer stores and the critics see); ``env_actions`` rescales them to the
action box.
"""

from __future__ import annotations

import hashlib
from contextlib import nullcontext
from copy import deepcopy
from typing import Any

import numpy as np
import torch

from rlightning_core.policy.base import BasePolicy, PolicyOutput, PolicyRole
from rlightning_core.policy.numerics import guard_of
from rlightning_core.policy.schedule import UpdateSchedule
from rlightning_sac.networks import Actor, Critics, EntropyCoef, squashed_sample
from rlightning_sac.params import SACParams

__all__ = ["ReplayActorCritic", "SACPolicy"]


def _adam(parameters: Any, lr: float) -> torch.optim.Optimizer:
    """Adam with the fused kernel where torch has one (one kernel per step instead of ~10 per tensor)."""
    parameters = list(parameters)
    try:
        return torch.optim.Adam(parameters, lr=lr, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(parameters, lr=lr, foreach=True)


def _space_info(observation_space: Any, action_space: Any, name: str = "sac") -> tuple[int, int]:
    """Flat observation and action widths; refuses, naming policy ``name``, what a tanh-squashed policy can't act in."""
    from gymnasium import spaces

    from rlightning_core.errors import unsupported_space
    from rlightning_core.spaces import refuse_flat_dict

    refuse_flat_dict(observation_space, name, allow_plain=True)
    if not isinstance(observation_space, spaces.Box):
        raise unsupported_space(f"policy '{name}'", "observation", observation_space, "Box (flat vectors)")
    if not isinstance(action_space, spaces.Box) or len(action_space.shape) != 1:
        raise unsupported_space(f"policy '{name}'", "action", action_space, "1-D Box",
                                "continuous actions only; for discrete actions use the dqn or ppo policy")
    if not (np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))):
        raise unsupported_space(f"policy '{name}'", "action", action_space, "bounded 1-D Box",
                                f"{name} squashes actions into the action box with tanh, so its bounds must be finite")
    return int(np.prod(observation_space.shape)), int(action_space.shape[0])


class _Deterministic(torch.nn.Module):
    """Observations -> ``tanh(mean)`` rescaled to the action box and clipped (the deterministic env actions)."""

    def __init__(self, actor: Actor, low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        self.actor = actor
        self.register_buffer("low", torch.as_tensor(low).clone())
        self.register_buffer("high", torch.as_tensor(high).clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions of a float32 batch."""
        mean, _ = self.actor(obs.reshape(obs.shape[0], -1))
        out = torch.tanh(mean)
        scaled = self.low + 0.5 * (out + 1.0) * (self.high - self.low)
        return torch.minimum(torch.maximum(scaled, self.low), self.high)


class ReplayActorCritic(BasePolicy):
    """What SAC and TD3 share: an actor on a bounded 1-D Box with critics, learned from a replay buffer.

    Subclasses build ``actor`` (with a ``trained`` buffer), ``critic`` and their optimizers after
    :meth:`_setup`, and define ``_update`` (one gradient update, returning its statistics as one tensor) and
    ``_summarize`` (those statistics summed over a learn call -> metrics). Generators, the update schedule and
    the update counter are saved and restored here.
    """

    default_buffer = "replay"
    extras_spec: dict[str, tuple[tuple[int, ...], Any]] = {}
    #: The policy's registered name, for messages.
    _name = ""
    #: Statistics ``_update`` returns, in order.
    _stats: tuple[str, ...] = ()
    actor: torch.nn.Module
    critic_optimizer: torch.optim.Optimizer | None

    def _setup(self, params: Any, observation_space: Any, action_space: Any, device: str, seed: int
               ) -> tuple[int, list[int]]:
        """Check the spaces, seed the parameter initialization and make the generators; ``(obs_dim, hidden)``."""
        obs_dim, self.act_dim = _space_info(observation_space, action_space, self._name)
        self.low = np.asarray(action_space.low, dtype=np.float32)
        self.high = np.asarray(action_space.high, dtype=np.float32)
        #: CPU generator: replay draws and rollout noise; ``noise_generator`` draws the learner's noise.
        self.generator = torch.Generator(device="cpu").manual_seed(seed + 1)
        self.noise_generator = torch.Generator(device=device).manual_seed(seed + 2)
        self.schedule = UpdateSchedule(params.utd_ratio, params.learning_starts)
        self.num_updates = 0
        torch.manual_seed(seed)  # parameter initialization is a function of the seed alone
        return obs_dim, [int(h) for h in params.hidden_sizes]

    def _obs(self, obs: np.ndarray | torch.Tensor) -> torch.Tensor:
        x = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
        return x.reshape(x.shape[0], -1) if x.dim() > 2 else x

    def _output(self, actions: torch.Tensor) -> PolicyOutput:
        """Actions in ``[-1, 1]`` (stored) with their rescaling to the action box (sent to the envs)."""
        out = actions.cpu().numpy()
        env_actions = np.clip(self.low + 0.5 * (out + 1.0) * (self.high - self.low), self.low, self.high)
        return PolicyOutput(actions=out, env_actions=env_actions.astype(np.float32, copy=False))

    def learn(self, buffer: Any, *, progress: float = 0.0) -> dict[str, float]:
        """Make the gradient updates the new data warrants (``utd_ratio``); returns their mean statistics.

        Besides the algorithm's (:meth:`_summarize`): ``stats/updates`` (this call's updates) and
        ``stats/num_updates`` (all so far). A call with no update due returns only the counters.
        """
        if self.critic_optimizer is None:
            raise RuntimeError(f"learn() called on a rollout copy of {self._name}")
        if not hasattr(buffer, "sample"):
            raise TypeError(f"{self._name} learns from a replay buffer (buffer.type: replay), got "
                            f"{type(buffer).__name__}")
        if hasattr(buffer, "set_progress"):
            buffer.set_progress(progress)
        n = self.schedule.due(buffer)
        metrics: dict[str, float] = {"stats/updates": float(n)}
        guard_of(self).begin_learn()  # NaN/inf in a loss or gradients: raise or skip (policy.nan_policy)
        if n:
            prioritized = bool(getattr(getattr(buffer, "params", None), "prioritized", False))
            sums = torch.zeros(len(self._stats), device=self.device)
            for _ in range(n):
                sums += self._update(buffer, prioritized)
            metrics.update(self._summarize(sums, n))
            self.actor.trained.fill_(1.0)
        metrics["stats/num_updates"] = float(self.num_updates)
        metrics.update(guard_of(self).metrics())
        return metrics

    def _update(self, buffer: Any, prioritized: bool) -> torch.Tensor:
        raise NotImplementedError

    def _summarize(self, sums: torch.Tensor, n: int) -> dict[str, float]:
        """Metrics of a learn call from its ``n`` updates' statistics summed: their means by default."""
        return dict(zip(self._stats, (sums / n).tolist(), strict=True))

    def _batch(self, buffer: Any) -> tuple[dict[str, Any], torch.Tensor, torch.Tensor, torch.Tensor]:
        """A replay batch on this device: ``(batch, obs, next_obs, bootstrap)``, observations flat float32."""
        batch = self.on_device(buffer.sample(self.params.batch_size, generator=self.generator))
        obs, next_obs = batch["obs"].float(), batch["next_obs"].float()
        if obs.dim() > 2:
            obs, next_obs = obs.flatten(1), next_obs.flatten(1)
        return batch, obs, next_obs, batch["discount"] * (1.0 - batch["terminated"])

    def rollout_modules(self) -> dict[str, Any]:
        """The actor alone (with its ``trained`` flag): what a rollout copy acts with and a sync sends."""
        return {"actor": self.actor}

    def extra_state(self) -> dict[str, Any]:
        """Generators and update counters, so a resumed run draws the same numbers and keeps the ratio."""
        return {"generator": self.generator.get_state(), "noise_generator": self.noise_generator.get_state(),
                "schedule": self.schedule.state_dict(), "num_updates": self.num_updates}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`extra_state`."""
        if "generator" in state:
            self.generator.set_state(state["generator"])
        if "noise_generator" in state:
            saved = state["noise_generator"]
            try:
                self.noise_generator.set_state(saved)
            except RuntimeError:  # saved on another kind of device (a GPU run resumed on CPU, or back)
                seed = int.from_bytes(hashlib.sha256(saved.numpy().tobytes()).digest()[:8], "little")
                self.noise_generator.manual_seed(seed)  # deterministic, though not the uninterrupted draws
        if "schedule" in state:
            self.schedule.load_state_dict(state["schedule"])
        self.num_updates = int(state.get("num_updates", self.num_updates))


class SACPolicy(ReplayActorCritic):
    """SAC with twin critics, target critics, a tanh-squashed Gaussian actor and automatic entropy tuning."""

    _name = "sac"
    _stats = ("loss/critic", "loss/actor", "loss/ent_coef", "stats/ent_coef", "stats/entropy", "stats/q_mean")

    def __init__(self, params: SACParams, *, observation_space: Any, action_space: Any,
                 role: PolicyRole = PolicyRole.LEARNER, device: str = "cpu", seed: int = 0) -> None:
        super().__init__(params, observation_space=observation_space, action_space=action_space, role=role,
                         device=device, seed=seed)
        obs_dim, hidden = self._setup(params, observation_space, action_space, device, seed)
        self.actor = Actor(obs_dim, self.act_dim, hidden, params.activation,
                           (params.log_std_bounds[0], params.log_std_bounds[1])).to(device)
        self.critic = Critics(2, obs_dim, self.act_dim, hidden, params.activation).to(device)
        self.critic_target = deepcopy(self.critic).requires_grad_(False)
        self.ent_coef = EntropyCoef(params.ent_coef).to(device)
        self.target_entropy = float(params.target_entropy if params.target_entropy is not None
                                    else -self.act_dim)
        self.actor_optimizer: torch.optim.Optimizer | None = None
        self.critic_optimizer: torch.optim.Optimizer | None = None
        self.ent_coef_optimizer: torch.optim.Optimizer | None = None
        if role is PolicyRole.LEARNER:
            self.actor_optimizer = _adam(self.actor.parameters(), params.lr)
            self.critic_optimizer = _adam(self.critic.parameters(), params.lr)
            if params.auto_ent_coef:
                self.ent_coef_optimizer = _adam(self.ent_coef.parameters(), params.lr)
        self._autocast = params.precision == "bf16"

    # -- rollout ---------------------------------------------------------------------------------------------
    def act(self, obs: np.ndarray, *, deterministic: bool = False) -> PolicyOutput:
        """Actions in ``[-1, 1]`` (stored) and rescaled to the action box (sent to the envs).

        ``deterministic`` takes ``tanh(mean)``. Until the rollout copy holds trained weights, and with
        ``warmup_actions: random``, stochastic actions are uniform over the box.
        """
        with torch.inference_mode():
            x = self._obs(obs)
            if (not deterministic and self.params.warmup_actions == "random"
                    and not bool(self.actor.trained)):
                actions = torch.rand((x.shape[0], self.act_dim), generator=self.generator) * 2.0 - 1.0
            else:
                mean, log_std = self.actor(x)
                if deterministic:
                    actions = torch.tanh(mean)
                else:
                    noise = torch.randn(mean.shape, generator=self.generator).to(mean.device)
                    actions = torch.tanh(mean + log_std.exp() * noise)
            return self._output(actions)

    def export_module(self) -> torch.nn.Module:
        """What ``act(obs, deterministic=True)`` sends to the envs, as a module (for ``rlightning export``)."""
        return _Deterministic(self.actor, self.low, self.high)

    def _cast(self) -> Any:
        """bf16 autocast around forward passes when ``precision: bf16`` (backward runs outside it)."""
        if not self._autocast:
            return nullcontext()
        return torch.autocast(device_type=torch.device(self.device).type, dtype=torch.bfloat16)

    # -- training --------------------------------------------------------------------------------------------
    # learn() (ReplayActorCritic's) reports the means over its updates of ``_stats``: ``loss/critic``,
    # ``loss/actor``, ``loss/ent_coef``, ``stats/ent_coef``, ``stats/entropy`` (``-log pi`` of the actor's
    # samples) and ``stats/q_mean``.
    def _update(self, buffer: Any, prioritized: bool) -> torch.Tensor:
        """One gradient update; returns its statistics as one tensor (no host sync per update)."""
        assert self.actor_optimizer is not None and self.critic_optimizer is not None
        p = self.params
        batch, obs, next_obs, bootstrap = self._batch(buffer)
        actions, weights = batch["actions"].float(), batch["weights"]
        noise = torch.randn((2, obs.shape[0], self.act_dim), generator=self.noise_generator, device=self.device)
        # 1. actions of the current actor (kept in the graph for the actor loss)
        with self._cast():
            mean, log_std = self.actor(obs)
            pi_actions, log_prob = squashed_sample(mean, log_std, noise[0])
        log_prob = log_prob.float()
        # 2. entropy coefficient
        log_alpha = self.ent_coef.log_alpha
        alpha = log_alpha.detach().exp()
        guard = guard_of(self)
        if self.ent_coef_optimizer is not None:
            ent_loss = -(log_alpha * (log_prob.detach() + self.target_entropy)).mean()
            self.ent_coef_optimizer.zero_grad(set_to_none=True)
            ent_loss.backward()
            if guard.check({"loss/ent_coef": ent_loss}, guard.grad_norm(self.ent_coef.parameters()),
                           where="sac entropy-coefficient update", optimizers=[self.ent_coef_optimizer]):
                self.ent_coef_optimizer.step()
        else:
            ent_loss = torch.zeros((), device=self.device)
        # 3. critics, towards the soft Bellman target of the target critics
        with torch.no_grad(), self._cast():
            next_mean, next_log_std = self.actor(next_obs)
            next_actions, next_log_prob = squashed_sample(next_mean, next_log_std, noise[1])
            next_q = self.critic_target(next_obs, next_actions).float().min(0).values
            target = batch["rewards"] + bootstrap * (next_q - alpha * next_log_prob.float())
        with self._cast():
            q = self.critic(obs, actions).float()
        td = q - target
        critic_loss = 0.5 * (weights * td.square()).mean(-1).sum()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        critic_norm = guard.grad_norm(self.critic.parameters(), p.max_grad_norm)
        critic_ok = guard.check({"loss/critic": critic_loss}, critic_norm, where="sac critic update",
                                optimizers=[self.critic_optimizer])
        if critic_ok:
            self.critic_optimizer.step()
        # 4. actor, through the updated critics read as constants
        with self._cast():
            q_pi = self.critic(obs, pi_actions, detach_params=True).float().min(0).values
        actor_loss = (alpha * log_prob - q_pi).mean()
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        if guard.check({"loss/actor": actor_loss}, guard.grad_norm(self.actor.parameters(), p.max_grad_norm),
                       where="sac actor update", optimizers=[self.actor_optimizer]):
            self.actor_optimizer.step()
        if prioritized and critic_ok:
            buffer.update_priorities(batch["indices"], td.detach().abs().mean(0))
        # 5. target critics
        self.num_updates += 1
        if self.num_updates % p.target_update_interval == 0:
            with torch.no_grad():
                for target, online in zip(self.critic_target.parameters(), self.critic.parameters(), strict=True):
                    target.lerp_(online, p.tau)
        with torch.no_grad():
            return torch.stack([critic_loss.detach(), actor_loss.detach(), ent_loss.detach(), alpha,
                                -log_prob.detach().mean(), q.detach().mean()])

    # -- state -----------------------------------------------------------------------------------------------
    def modules(self) -> dict[str, Any]:
        """Actor, critics, target critics and the entropy coefficient."""
        return {"actor": self.actor, "critic": self.critic, "critic_target": self.critic_target,
                "ent_coef": self.ent_coef}

    def optimizers(self) -> dict[str, Any]:
        """Adam of actor, critics and (when tuned) the entropy coefficient; learners only."""
        opts = {"actor": self.actor_optimizer, "critic": self.critic_optimizer, "ent_coef": self.ent_coef_optimizer}
        return {k: v for k, v in opts.items() if v is not None}
