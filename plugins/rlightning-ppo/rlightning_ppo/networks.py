"""Actor-critic MLPs for PPO: categorical or diagonal-Gaussian heads (state-independent log-std)."""

from __future__ import annotations

import math

import torch
from torch import nn

_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU,
}


def _layer(in_dim: int, out_dim: int, gain: float, ortho: bool) -> nn.Linear:
    layer = nn.Linear(in_dim, out_dim)
    if ortho:
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return layer


def mlp_body(in_dim: int, sizes: list[int], activation: str, ortho: bool) -> tuple[nn.Sequential, int]:
    """Hidden layers; returns the module and its output width."""
    layers: list[nn.Module] = []
    width = in_dim
    for size in sizes:
        layers += [_layer(width, size, math.sqrt(2), ortho), _ACTIVATIONS[activation]()]
        width = size
    return nn.Sequential(*layers), width


class ActorCritic(nn.Module):
    """``pi(obs)`` gives logits (discrete) or means (continuous); ``v(obs)`` the state value."""

    def __init__(self, obs_dim: int, act_dim: int, *, discrete: bool, hidden_sizes: list[int], activation: str,
                 shared: bool, ortho: bool, log_std_init: float) -> None:
        super().__init__()
        self.discrete = discrete
        self.shared = shared
        self.pi_body, width = mlp_body(obs_dim, hidden_sizes, activation, ortho)
        self.v_body = self.pi_body if shared else mlp_body(obs_dim, hidden_sizes, activation, ortho)[0]
        self.pi_head = _layer(width, act_dim, 0.01, ortho)
        self.v_head = _layer(width, 1, 1.0, ortho)
        if not discrete:
            self.log_std = nn.Parameter(torch.full((act_dim,), float(log_std_init)))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Policy output and value of a batch."""
        h = self.pi_body(obs)
        value = self.v_head(h if self.shared else self.v_body(obs)).squeeze(-1)
        return self.pi_head(h), value

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values of a batch."""
        return self.v_head(self.v_body(obs)).squeeze(-1)


_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def gaussian_log_prob(actions: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """Log-density of a diagonal Gaussian, summed over action dimensions."""
    z = (actions - mean) * torch.exp(-log_std)
    return (-0.5 * z * z - log_std - _LOG_SQRT_2PI).sum(-1)


def gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    """Entropy of a diagonal Gaussian (independent of the mean)."""
    return (0.5 + _LOG_SQRT_2PI + log_std).sum(-1)
