r"""Twin Delayed DDPG (Fujimoto et al., 2018, "Addressing Function Approximation Error in Actor-Critic Methods").

One class serves both roles: a rollout copy (``ROLLOUT``) only runs :meth:`TD3Policy.act`; a learner (``LEARNER``)
also owns the optimizers and runs :meth:`TD3Policy.learn` on a replay buffer. Per gradient update ``k``:

1. target policy smoothing: :math:`a' = \operatorname{clip}(\mu'(s') + \operatorname{clip}(\epsilon, -c, c),
   -1, 1)` with :math:`\epsilon \sim \mathcal{N}(0, \sigma^2)` (``target_noise`` :math:`\sigma`,
   ``target_noise_clip`` :math:`c`) and the target actor :math:`\mu'`;
2. critics, towards the smaller of the twin target critics (clipped double Q):
   :math:`y = r + d\,(1 - \text{term}) \min_{j=1,2} Q'_j(s', a')`,
   :math:`L(Q) = \sum_j \mathbb{E}[w (Q_j(s, a) - y)^2]` with importance weights ``w`` (ones unless the buffer
   is prioritized), ``r`` the buffer's (n-step) return and ``d`` its ``discount``;
3. every ``policy_delay`` updates (when :math:`k \bmod` ``policy_delay`` :math:`= 0`): the actor ascends the first
   critic, :math:`L(\mu) = -\mathbb{E}[Q_1(s, \mu(s))]` (critic weights read as constants), then the target
   actor and target critics move: :math:`\theta' \leftarrow (1-\tau)\theta' + \tau\theta`.

Rollout copies act with :math:`\operatorname{clip}(\mu(s) + \mathcal{N}(0, \text{action\_noise}^2), -1, 1)`, and
uniformly at random until they receive trained weights (the warm-up of ``learning_starts`` transitions).
Actions live in ``[-1, 1]`` (what the buffer stores and the critics see); ``env_actions`` rescales them to the
action box. The critics are SAC's ensemble (:class:`rlightning_sac.networks.Critics`); the learn loop, replay
batches, generators, schedule and counters are SAC's too (:class:`rlightning_sac.policy.ReplayActorCritic`).
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

import numpy as np
import torch
from rlightning_sac.networks import Critics
from rlightning_sac.policy import ReplayActorCritic, _adam

from rlightning_core.policy.base import PolicyOutput, PolicyRole
from rlightning_core.policy.numerics import guard_of
from rlightning_td3.networks import Actor, ScaledActor
from rlightning_td3.params import TD3Params

__all__ = ["TD3Policy"]


def _polyak(target: torch.nn.Module, online: torch.nn.Module, tau: float) -> None:
    with torch.no_grad():
        for t, o in zip(target.parameters(), online.parameters(), strict=True):
            t.lerp_(o, tau)


class TD3Policy(ReplayActorCritic):
    """TD3: a deterministic tanh actor, twin critics, target networks, smoothing and delayed actor updates."""

    _name = "td3"
    _stats = ("loss/critic", "stats/q_mean", "loss/actor", "stats/actor_updates")

    def __init__(self, params: TD3Params, *, observation_space: Any, action_space: Any,
                 role: PolicyRole = PolicyRole.LEARNER, device: str = "cpu", seed: int = 0) -> None:
        super().__init__(params, observation_space=observation_space, action_space=action_space, role=role,
                         device=device, seed=seed)
        obs_dim, hidden = self._setup(params, observation_space, action_space, device, seed)
        self.actor = Actor(obs_dim, self.act_dim, hidden, params.activation).to(device)
        self.actor_target = deepcopy(self.actor).requires_grad_(False)
        self.critic = Critics(2, obs_dim, self.act_dim, hidden, params.activation).to(device)
        self.critic_target = deepcopy(self.critic).requires_grad_(False)
        self.actor_optimizer: torch.optim.Optimizer | None = None
        self.critic_optimizer: torch.optim.Optimizer | None = None
        if role is PolicyRole.LEARNER:
            self.actor_optimizer = _adam(self.actor.parameters(), params.lr)
            self.critic_optimizer = _adam(self.critic.parameters(), params.lr)

    # -- rollout ---------------------------------------------------------------------------------------------
    def act(self, obs: np.ndarray, *, deterministic: bool = False) -> PolicyOutput:
        """Actions in ``[-1, 1]`` (stored) and rescaled to the action box (sent to the envs).

        ``deterministic`` takes the actor's output. Otherwise Gaussian ``action_noise`` is added and the sum
        clipped, and until the rollout copy holds trained weights the actions are uniform over the box.
        """
        with torch.inference_mode():
            x = self._obs(obs)
            if not deterministic and not bool(self.actor.trained):
                actions = torch.rand((x.shape[0], self.act_dim), generator=self.generator) * 2.0 - 1.0
            else:
                actions = self.actor(x).cpu()
                if not deterministic and self.params.action_noise > 0:
                    noise = torch.randn(actions.shape, generator=self.generator)
                    actions = (actions + self.params.action_noise * noise).clamp(-1.0, 1.0)
            return self._output(actions)

    def export_module(self) -> torch.nn.Module:
        """What ``act(obs, deterministic=True)`` sends to the envs, as a module (for ``rlightning export``)."""
        return ScaledActor(self.actor, self.low, self.high)

    # -- training --------------------------------------------------------------------------------------------
    def _summarize(self, sums: torch.Tensor, n: int) -> dict[str, float]:
        """Means over the call's updates of ``loss/critic`` and ``stats/q_mean``; ``stats/actor_updates``.

        ``loss/actor`` is the mean over the call's actor updates, when it made any.
        """
        critic, q_mean, actor, actor_updates = sums.tolist()
        metrics = {"loss/critic": critic / n, "stats/q_mean": q_mean / n, "stats/actor_updates": actor_updates}
        if actor_updates:
            metrics["loss/actor"] = actor / actor_updates
        return metrics

    def target_actions(self, next_obs: torch.Tensor) -> torch.Tensor:
        """The target actor's actions with clipped Gaussian noise (target policy smoothing), in ``[-1, 1]``."""
        p = self.params
        with torch.no_grad():
            mu = self.actor_target(next_obs)
            noise = torch.randn(mu.shape, generator=self.noise_generator, device=self.device)
            noise = (noise * p.target_noise).clamp(-p.target_noise_clip, p.target_noise_clip)
            return (mu + noise).clamp(-1.0, 1.0)

    def _update(self, buffer: Any, prioritized: bool) -> torch.Tensor:
        """One critic update, and an actor + target update when due.

        Returns ``[critic loss, mean Q, actor loss, 1 if the actor moved]`` as one tensor (no host sync per update).
        """
        assert self.actor_optimizer is not None and self.critic_optimizer is not None
        p = self.params
        batch, obs, next_obs, bootstrap = self._batch(buffer)
        actions = batch["actions"].float()
        guard = guard_of(self)
        self.num_updates += 1
        with torch.no_grad():
            next_actions = self.target_actions(next_obs)  # 1. target policy smoothing
            # 2. clipped double-Q target
            target = batch["rewards"] + bootstrap * self.critic_target(next_obs, next_actions).min(0).values
        q = self.critic(obs, actions)
        td = q - target
        critic_loss = (batch["weights"] * td.square()).mean(-1).sum()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        critic_ok = guard.check({"loss/critic": critic_loss}, guard.grad_norm(self.critic.parameters()),
                                where="td3 critic update", optimizers=[self.critic_optimizer])
        if critic_ok:
            self.critic_optimizer.step()
        if prioritized and critic_ok:
            buffer.update_priorities(batch["indices"], td.detach().abs().mean(0))
        # 3. delayed actor update, then the targets
        actor_loss = torch.zeros((), device=self.device)
        delayed = self.num_updates % p.policy_delay == 0
        if delayed:
            actor_loss = -self.critic(obs, self.actor(obs), detach_params=True, members=1)[0].mean()
            self.actor_optimizer.zero_grad(set_to_none=True)
            actor_loss.backward()
            if guard.check({"loss/actor": actor_loss}, guard.grad_norm(self.actor.parameters()),
                           where="td3 actor update", optimizers=[self.actor_optimizer]):
                self.actor_optimizer.step()
            _polyak(self.critic_target, self.critic, p.tau)
            _polyak(self.actor_target, self.actor, p.tau)
        with torch.no_grad():
            return torch.stack([critic_loss.detach(), q.detach().mean(), actor_loss.detach(),
                                torch.tensor(float(delayed), device=self.device)])

    # -- state -----------------------------------------------------------------------------------------------
    def modules(self) -> dict[str, Any]:
        """Actor, critics and their targets."""
        return {"actor": self.actor, "actor_target": self.actor_target, "critic": self.critic,
                "critic_target": self.critic_target}

    def optimizers(self) -> dict[str, Any]:
        """Adam of actor and critics; learners only."""
        opts = {"actor": self.actor_optimizer, "critic": self.critic_optimizer}
        return {k: v for k, v in opts.items() if v is not None}
