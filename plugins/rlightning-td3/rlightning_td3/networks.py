"""TD3's actor: a deterministic MLP with a tanh output. The critics are SAC's ensemble (:mod:`rlightning_sac`)."""

from __future__ import annotations

import numpy as np
import torch
from rlightning_sac.networks import mlp
from torch import nn


class Actor(nn.Module):
    """``obs -> tanh(MLP(obs))``, an action in ``[-1, 1]`` per dimension.

    The buffer ``trained`` (0 or 1) travels with the weights: it tells rollout copies that the learner has
    started updating, which ends the random-action warm-up.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: list[int], activation: str) -> None:
        super().__init__()
        self.body, width = mlp(obs_dim, hidden_sizes, activation)
        self.head = nn.Linear(width, act_dim)
        self.register_buffer("trained", torch.zeros(()))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Normalized actions of a batch of flat observations."""
        return torch.tanh(self.head(self.body(obs)))


class ScaledActor(nn.Module):
    """The actor's output rescaled to the action box: what ``act(obs, deterministic=True)`` sends to the envs."""

    def __init__(self, actor: Actor, low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        self.actor = actor
        self.register_buffer("low", torch.as_tensor(low).clone())
        self.register_buffer("high", torch.as_tensor(high).clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Env actions of a float32 batch."""
        out = self.actor(obs.reshape(obs.shape[0], -1))
        return (self.low + 0.5 * (out + 1.0) * (self.high - self.low)).clamp(self.low, self.high)
