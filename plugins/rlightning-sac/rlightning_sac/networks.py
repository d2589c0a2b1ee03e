r"""SAC's networks: a tanh-squashed Gaussian actor and an ensemble of Q critics evaluated in one batched pass.

The critics are an *ensemble*: every layer holds the weights of all critics stacked (``[n, in, out]``) and
runs as one batched matrix product (``baddbmm``), so twin critics cost one kernel per layer instead of two.
Each critic is initialized like ``nn.Linear`` (uniform in :math:`\pm 1/\sqrt{\text{fan\_in}}`) and its
parameters are independent; :meth:`Critics.forward` can read them detached, so the actor's loss
backpropagates into the actions without computing gradients for the critics' weights.
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn
from torch.nn import functional as F

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU,
}
_FUNCTIONAL = {"relu": F.relu, "tanh": torch.tanh, "elu": F.elu, "gelu": F.gelu, "silu": F.silu}
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_LOG_2 = math.log(2.0)


def mlp(in_dim: int, sizes: list[int], activation: str) -> tuple[nn.Sequential, int]:
    """Hidden layers (``nn.Linear`` + activation); returns the module and its output width."""
    layers: list[nn.Module] = []
    width = in_dim
    for size in sizes:
        layers += [nn.Linear(width, int(size)), ACTIVATIONS[activation]()]
        width = int(size)
    return nn.Sequential(*layers), width


class Actor(nn.Module):
    """``obs -> (mean, log_std)`` of a diagonal Gaussian over pre-squash actions.

    The buffer ``trained`` (0 or 1) travels with the weights: it tells rollout copies that the learner has
    started updating, which ends the random-action warm-up.
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: list[int], activation: str,
                 log_std_bounds: tuple[float, float]) -> None:
        super().__init__()
        self.body, width = mlp(obs_dim, hidden_sizes, activation)
        self.head = nn.Linear(width, 2 * act_dim)
        self.log_std_min, self.log_std_max = float(log_std_bounds[0]), float(log_std_bounds[1])
        self.register_buffer("trained", torch.zeros(()))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and clamped log standard deviation of a batch."""
        mean, log_std = self.head(self.body(obs)).chunk(2, dim=-1)
        return mean, log_std.clamp(self.log_std_min, self.log_std_max)


def squashed_sample(mean: torch.Tensor, log_std: torch.Tensor, noise: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Reparameterized sample :math:`a = \tanh(\mu + \sigma \epsilon)` and its log-density.

    .. math::

        \log \pi(a|s) = \sum_i \Big[\log \mathcal{N}(u_i; \mu_i, \sigma_i) - \log(1 - \tanh^2 u_i)\Big],
        \qquad \log(1 - \tanh^2 u) = 2\,(\log 2 - u - \operatorname{softplus}(-2u)),

    the change of variables of the tanh squashing (Haarnoja et al. 2018, appendix C), in the numerically
    stable form (no ``log(0)`` where ``tanh`` saturates).

    Args:
        mean: Gaussian means, ``[B, A]``.
        log_std: log standard deviations, ``[B, A]``.
        noise: standard normal draws, ``[B, A]``.
    """
    u = mean + log_std.exp() * noise
    log_prob = (-0.5 * noise.square() - log_std - _LOG_SQRT_2PI).sum(-1)
    log_prob = log_prob - (2.0 * (_LOG_2 - u - F.softplus(-2.0 * u))).sum(-1)
    return torch.tanh(u), log_prob


class EnsembleLinear(nn.Module):
    """``n`` independent linear layers applied as one batched product: ``[n, B, in] -> [n, B, out]``."""

    def __init__(self, n: int, in_features: int, out_features: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_features)
        self.weight = nn.Parameter(torch.empty(n, in_features, out_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(n, 1, out_features).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor, detach: bool = False, members: int | None = None) -> torch.Tensor:
        """``x @ W + b`` per member.

        ``detach`` reads the parameters without tracking their gradients; ``members`` uses only the first that
        many (``x`` then has that many rows).
        """
        weight, bias = (self.weight.detach(), self.bias.detach()) if detach else (self.weight, self.bias)
        if members is not None:
            weight, bias = weight[:members], bias[:members]
        return torch.baddbmm(bias, x, weight)


class Critics(nn.Module):
    """An ensemble of ``n`` Q networks ``Q_k(obs, action)``, all evaluated together: returns ``[n, B]``."""

    def __init__(self, n: int, obs_dim: int, act_dim: int, hidden_sizes: list[int], activation: str) -> None:
        super().__init__()
        self.n = n
        widths = [obs_dim + act_dim, *map(int, hidden_sizes)]
        self.hidden = nn.ModuleList(EnsembleLinear(n, a, b) for a, b in itertools.pairwise(widths))
        self.out = EnsembleLinear(n, widths[-1], 1)
        self.activation = _FUNCTIONAL[activation]

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, detach_params: bool = False,
                members: int | None = None) -> torch.Tensor:
        """Q values of every member (or of the first ``members``) for a batch, ``[n, B]``.

        Args:
            obs: observations ``[B, obs_dim]``.
            actions: actions ``[B, act_dim]`` (in the squashed ``[-1, 1]`` space).
            detach_params: use the weights as constants (gradients still flow into ``obs`` and ``actions``).
            members: evaluate only the first this many critics (TD3's actor loss reads ``Q_1`` alone).
        """
        n = self.n if members is None else members
        x = torch.cat([obs, actions], dim=-1).unsqueeze(0).expand(n, -1, -1)
        for layer in self.hidden:
            x = self.activation(layer(x, detach_params, members))
        return self.out(x, detach_params, members).squeeze(-1)


class EntropyCoef(nn.Module):
    r"""Holds :math:`\log \alpha` as a parameter, so it is saved and tuned like the networks."""

    def __init__(self, init: float) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(math.log(init), dtype=torch.float32))

    def forward(self) -> torch.Tensor:
        """The current alpha."""
        return self.log_alpha.exp()
