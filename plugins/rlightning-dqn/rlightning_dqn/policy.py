r"""Deep Q-Networks (Mnih et al., 2015) with the double-DQN target (van Hasselt et al., 2016).

One class serves both roles: a rollout copy (``ROLLOUT``) runs epsilon-greedy :meth:`DQNPolicy.act`; a learner
(``LEARNER``) also owns the optimizer and runs :meth:`DQNPolicy.learn` on a replay buffer. Per gradient update:

.. math::

    y = R + d\,(1 - \text{term})\; Q'\big(s', \arg\max_{a'} Q(s', a')\big) \quad \text{(double DQN)}, \qquad
    y = R + d\,(1 - \text{term}) \max_{a'} Q'(s', a') \quad \text{(DQN)},

    L = \mathbb{E}\big[w \,\ell(Q(s, a) - y)\big],

with the buffer's n-step return ``R`` and discount ``d`` (``gamma**m``), the target network ``Q'``, the Huber
(or squared) loss ``ell``, and importance weights ``w`` (ones unless the buffer is prioritized, in which case
``|Q(s, a) - y|`` goes back to the buffer as the new priorities). Every ``target_update_interval`` updates,
``Q' <- (1 - tau) Q' + tau Q``.

Epsilon decays linearly with the training progress the engine passes to ``learn``; it lives in a buffer of the
``exploration`` module, so rollout copies receive it with the weights.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rlightning_core.buffer.storage import as_tensor
from rlightning_core.policy.base import BasePolicy, PolicyOutput, PolicyRole
from rlightning_core.policy.encoders import encoder_kind
from rlightning_core.policy.numerics import guard_of
from rlightning_core.policy.schedule import UpdateSchedule
from rlightning_dqn.params import DQNParams

__all__ = ["CNNQNetwork", "DQNPolicy", "QNetwork", "epsilon_at"]

_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU,
}


class QNetwork(nn.Sequential):
    """An MLP ``obs -> Q(obs, a)`` for every action ``a``."""

    def __init__(self, obs_dim: int, n_actions: int, hidden_sizes: list[int], activation: str) -> None:
        layers: list[nn.Module] = []
        width = obs_dim
        for size in hidden_sizes:
            layers += [nn.Linear(width, int(size)), _ACTIVATIONS[activation]()]
            width = int(size)
        super().__init__(*layers, nn.Linear(width, n_actions))


class CNNQNetwork(nn.Sequential):
    """The Nature-DQN CNN then one linear layer: ``[B, C, H, W]`` images in pixel units -> ``Q(obs, a)``."""

    def __init__(self, shape: tuple[int, ...], n_actions: int, features: int) -> None:
        from rlightning_core.policy.encoders import NatureCNN

        super().__init__(NatureCNN(shape, features), nn.Linear(features, n_actions))


class Exploration(nn.Module):
    """Holds the current epsilon as a buffer, so that it travels to rollout copies with the weights."""

    def __init__(self, epsilon: float) -> None:
        super().__init__()
        self.register_buffer("epsilon", torch.tensor(float(epsilon)))


def epsilon_at(progress: float, params: DQNParams) -> float:
    """Linear decay from ``exploration_initial_eps`` to ``exploration_final_eps`` over ``exploration_fraction``."""
    if params.exploration_fraction <= 0:
        return params.exploration_final_eps
    frac = min(1.0, max(0.0, progress) / params.exploration_fraction)
    return params.exploration_initial_eps + frac * (params.exploration_final_eps - params.exploration_initial_eps)


def _space_info(observation_space: Any, action_space: Any) -> tuple[int, int, int]:
    from gymnasium import spaces

    from rlightning_core.errors import unsupported_space

    if not isinstance(observation_space, spaces.Box):
        raise unsupported_space("policy 'dqn'", "observation", observation_space,
                                "Box (vectors, or (C, H, W) uint8 images)")
    if not isinstance(action_space, spaces.Discrete):
        raise unsupported_space("policy 'dqn'", "action", action_space, "Discrete",
                                "for continuous actions use sac, for MultiDiscrete / MultiBinary ppo")
    from rlightning_core.spaces import ACTION_MASK, FlatDict

    if isinstance(observation_space, FlatDict):
        if observation_space.image_keys():  # flat keys (and the mask) are one vector for the MLP
            raise unsupported_space("policy 'dqn'", "observation", observation_space.dict_space,
                                    "Box and Dict without image keys",
                                    f"image keys {observation_space.image_keys()}: use ppo, which encodes each key")
        if observation_space.has_action_mask and observation_space.layout[ACTION_MASK][1] != int(action_space.n):
            raise unsupported_space("policy 'dqn'", "observation", observation_space.dict_space,
                                    f"an {ACTION_MASK!r} key with one entry per action ({int(action_space.n)})",
                                    f"its {ACTION_MASK!r} key has {observation_space.layout[ACTION_MASK][1]} "
                                    "entries")
    return int(np.prod(observation_space.shape)), int(action_space.n), int(action_space.start)


def _adam(parameters: Any, lr: float) -> torch.optim.Optimizer:
    """Adam with the fused kernel where torch has one."""
    parameters = list(parameters)
    try:
        return torch.optim.Adam(parameters, lr=lr, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(parameters, lr=lr, foreach=True)


def _masked(q: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``q`` with illegal actions at ``-inf`` (for argmax only; no-op without a mask)."""
    return q if mask is None else q.masked_fill(~mask, float("-inf"))


class _Greedy(torch.nn.Module):
    """Observations -> greedy env actions (``argmax Q`` over legal actions plus the action space's ``start``)."""

    def __init__(self, q: QNetwork | CNNQNetwork, start: int, mask_cols: slice | None = None) -> None:
        super().__init__()
        self.q, self.start, self.mask_cols = q, int(start), mask_cols
        self.flatten = not isinstance(q, CNNQNetwork)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Actions of a float32 batch (images in pixel units, [0, 255])."""
        q = self.q(obs.reshape(obs.shape[0], -1) if self.flatten else obs)
        if self.mask_cols is not None:
            q = _masked(q, obs.reshape(obs.shape[0], -1)[:, self.mask_cols] > 0.5)
        return q.argmax(-1) + self.start


class DQNPolicy(BasePolicy):
    """DQN / double DQN with a target network and epsilon-greedy exploration."""

    default_buffer = "replay"
    extras_spec: dict[str, tuple[tuple[int, ...], Any]] = {}

    def __init__(self, params: DQNParams, *, observation_space: Any, action_space: Any,
                 role: PolicyRole = PolicyRole.LEARNER, device: str = "cpu", seed: int = 0) -> None:
        super().__init__(params, observation_space=observation_space, action_space=action_space, role=role,
                         device=device, seed=seed)
        obs_dim, self.n_actions, self.action_start = _space_info(observation_space, action_space)
        #: Images: observations keep their dtype (uint8) up to the CNN, which scales them on the device.
        self.image = encoder_kind(observation_space, params.encoder) == "cnn"
        from rlightning_core.spaces import ACTION_MASK, FlatDict

        #: Columns of the legal-action mask in the flat observations (``None``: no masking).
        self.mask_cols = (observation_space.columns(ACTION_MASK) if isinstance(observation_space, FlatDict)
                          and observation_space.has_action_mask else None)
        torch.manual_seed(seed)  # parameter initialization is a function of the seed alone
        if self.image:
            self.q: QNetwork | CNNQNetwork = CNNQNetwork(tuple(observation_space.shape), self.n_actions,
                                                         params.cnn_features).to(device)
        else:
            self.q = QNetwork(obs_dim, self.n_actions, [int(h) for h in params.hidden_sizes],
                              params.activation).to(device)
        self.q_target = deepcopy(self.q).requires_grad_(False)
        self.exploration = Exploration(params.exploration_initial_eps).to(device)
        #: CPU generator: replay draws and epsilon-greedy choices.
        self.generator = torch.Generator(device="cpu").manual_seed(seed + 1)
        self.schedule = UpdateSchedule(params.utd_ratio, params.learning_starts)
        self.num_updates = 0
        self.optimizer = _adam(self.q.parameters(), params.lr) if role is PolicyRole.LEARNER else None

    # -- rollout ---------------------------------------------------------------------------------------------
    def _obs(self, obs: np.ndarray | torch.Tensor) -> torch.Tensor:
        if self.image:  # stays uint8 up to the device; the CNN converts it there
            return as_tensor(obs).to(self.device)
        x = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
        return x.reshape(x.shape[0], -1) if x.dim() > 2 else x

    def act(self, obs: np.ndarray, *, deterministic: bool = False) -> PolicyOutput:
        """Greedy actions, each replaced by a uniform random one with probability epsilon unless deterministic."""
        with torch.inference_mode():
            x = self._obs(obs)
            mask = self._mask(x)
            greedy = _masked(self.q(x), mask).argmax(-1).cpu()
            if deterministic:
                actions = greedy
            else:
                n = greedy.shape[0]
                explore = torch.rand(n, generator=self.generator) < float(self.exploration.epsilon)
                if mask is None:
                    random = torch.randint(0, self.n_actions, (n,), generator=self.generator)
                else:  # uniform over the legal actions: the largest of iid uniforms over them
                    u = torch.rand((n, self.n_actions), generator=self.generator)
                    random = u.masked_fill(~mask.cpu(), -1.0).argmax(-1)
                actions = torch.where(explore, random, greedy)
            out = actions.numpy().astype(np.int64)
        return PolicyOutput(actions=out, env_actions=out + self.action_start if self.action_start else None)

    def _mask(self, obs: torch.Tensor) -> torch.Tensor | None:
        """The legal-action mask (bool ``[B, n]``) of a flat batch, or ``None`` without masking.

        Raises:
            ValueError: an observation allows no action at all.
        """
        if self.mask_cols is None:
            return None
        mask = obs.reshape(obs.shape[0], -1)[:, self.mask_cols] > 0.5
        if not bool(mask.any(-1).all()):
            raise ValueError("dqn: an observation's action_mask allows no action; an env must leave one legal")
        return mask

    def export_module(self) -> torch.nn.Module:
        """Greedy ``act(obs, deterministic=True)`` as a module (for ``rlightning export``)."""
        return _Greedy(self.q, self.action_start or 0, self.mask_cols)

    # -- training --------------------------------------------------------------------------------------------
    def learn(self, buffer: Any, *, progress: float = 0.0) -> dict[str, float]:
        """Make the gradient updates the new data warrants (``utd_ratio``); returns their mean statistics.

        Metrics: ``loss/td`` (mean TD loss), ``stats/q_mean``, ``stats/td_abs`` (mean ``|TD error|``),
        ``stats/epsilon``, ``stats/updates`` (this call's updates) and ``stats/num_updates`` (all so far).
        """
        if self.optimizer is None:
            raise RuntimeError("learn() called on a rollout copy of dqn")
        if not hasattr(buffer, "sample"):
            raise TypeError(f"dqn learns from a replay buffer (buffer.type: replay), got {type(buffer).__name__}")
        epsilon = epsilon_at(progress, self.params)
        self.exploration.epsilon.fill_(epsilon)
        if hasattr(buffer, "set_progress"):
            buffer.set_progress(progress)
        n = self.schedule.due(buffer)
        metrics: dict[str, float] = {"stats/updates": float(n), "stats/epsilon": epsilon}
        guard_of(self).begin_learn()  # NaN/inf in the loss or gradients: raise or skip (policy.nan_policy)
        if n:
            prioritized = bool(getattr(getattr(buffer, "params", None), "prioritized", False))
            sums = torch.zeros(3, device=self.device)
            for _ in range(n):
                sums += self._update(buffer, prioritized)
            metrics.update(zip(("loss/td", "stats/q_mean", "stats/td_abs"), (sums / n).tolist(), strict=True))
        metrics["stats/num_updates"] = float(self.num_updates)
        metrics.update(guard_of(self).metrics())
        return metrics

    def _update(self, buffer: Any, prioritized: bool) -> torch.Tensor:
        """One gradient update; returns (loss, mean Q, mean |TD|) as one tensor (no host sync per update)."""
        assert self.optimizer is not None
        p = self.params
        batch = self.on_device(buffer.sample(p.batch_size, generator=self.generator))
        obs, next_obs = batch["obs"], batch["next_obs"]
        if not self.image:
            obs, next_obs = obs.float(), next_obs.float()
        if obs.dim() > 2 and not self.image:
            obs, next_obs = obs.flatten(1), next_obs.flatten(1)
        with torch.no_grad():
            next_q_target = self.q_target(next_obs)
            # the max over legal next actions (a terminal next state may allow none: its value is not used)
            next_mask = None if self.mask_cols is None else next_obs[:, self.mask_cols] > 0.5
            if p.double_dqn:
                best = _masked(self.q(next_obs), next_mask).argmax(-1, keepdim=True)
                next_q = next_q_target.gather(-1, best).squeeze(-1)
            elif next_mask is None:
                next_q = next_q_target.max(-1).values
            else:
                best = _masked(next_q_target, next_mask).argmax(-1, keepdim=True)
                next_q = next_q_target.gather(-1, best).squeeze(-1)
            target = batch["rewards"] + batch["discount"] * (1.0 - batch["terminated"]) * next_q
        q = self.q(obs).gather(-1, batch["actions"].long().reshape(-1, 1)).squeeze(-1)
        td = q - target
        per_item = F.smooth_l1_loss(q, target, reduction="none") if p.loss == "huber" else td.square()
        loss = (batch["weights"] * per_item).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        guard = guard_of(self)
        ok = guard.check({"loss/td": loss}, guard.grad_norm(self.q.parameters(), p.max_grad_norm),
                         where="dqn update", optimizers=[self.optimizer])
        if ok:
            self.optimizer.step()
        td_abs = td.detach().abs()
        if prioritized and ok:
            buffer.update_priorities(batch["indices"], td_abs)
        self.num_updates += 1
        if self.num_updates % p.target_update_interval == 0:
            with torch.no_grad():
                for target, online in zip(self.q_target.parameters(), self.q.parameters(), strict=True):
                    if p.tau >= 1.0:
                        target.copy_(online)
                    else:
                        target.lerp_(online, p.tau)
        with torch.no_grad():
            return torch.stack([loss.detach(), q.detach().mean(), td_abs.mean()])

    # -- state -----------------------------------------------------------------------------------------------
    def modules(self) -> dict[str, Any]:
        """Q network, target network and the exploration state (epsilon)."""
        return {"q": self.q, "q_target": self.q_target, "exploration": self.exploration}

    def rollout_modules(self) -> dict[str, Any]:
        """The online Q network and the exploration schedule; the target network stays with the learner."""
        return {"q": self.q, "exploration": self.exploration}

    def optimizers(self) -> dict[str, Any]:
        """Adam (learners only)."""
        return {"adam": self.optimizer} if self.optimizer is not None else {}

    def extra_state(self) -> dict[str, Any]:
        """The generator and the update counters."""
        return {"generator": self.generator.get_state(), "schedule": self.schedule.state_dict(),
                "num_updates": self.num_updates}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`extra_state`."""
        if "generator" in state:
            self.generator.set_state(state["generator"])
        if "schedule" in state:
            self.schedule.load_state_dict(state["schedule"])
        self.num_updates = int(state.get("num_updates", self.num_updates))
