"""Actor-critics for PPO (an MLP, or a CNN for images) with categorical or diagonal-Gaussian heads."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU,
}
#: The same activations as plain functions, for the fused path (a module call costs more than a small op).
_FUNCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "tanh": torch.tanh, "relu": torch.relu, "elu": nn.functional.elu, "gelu": nn.functional.gelu,
    "silu": nn.functional.silu,
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
    """``pi(obs)`` gives logits (discrete) or means (continuous); ``v(obs)`` the state value.

    With separate (not shared) actor and critic bodies of one or more hidden layers, both bodies are stored
    stacked and run together: the first layer as one matrix product of width ``2 * hidden``, the later ones as
    one batched product over the pair. Small MLPs on a CPU are bound by per-operation overhead, not arithmetic,
    so halving the number of operations speeds up both acting and learning (docs/benchmarks.md). The parameters
    are initialized exactly as two separate MLPs would be.
    """

    def __init__(self, obs_dim: int, act_dim: int, *, discrete: bool, hidden_sizes: list[int], activation: str,
                 shared: bool, ortho: bool, log_std_init: float) -> None:
        super().__init__()
        self.discrete = discrete
        self.shared = shared
        self.fused = not shared and len(hidden_sizes) > 0
        pi_body, width = mlp_body(obs_dim, hidden_sizes, activation, ortho)
        v_body = pi_body if shared else mlp_body(obs_dim, hidden_sizes, activation, ortho)[0]
        self.pi_head = _layer(width, act_dim, 0.01, ortho)
        self.v_head = _layer(width, 1, 1.0, ortho)
        if self.fused:
            self.act_fn = _FUNCTIONS[activation]
            pi_layers = [m for m in pi_body if isinstance(m, nn.Linear)]
            v_layers = [m for m in v_body if isinstance(m, nn.Linear)]
            with torch.no_grad():
                # first layer: y = obs @ w_in + b_in, actor columns first, then critic columns
                self.w_in = nn.Parameter(torch.cat([pi_layers[0].weight, v_layers[0].weight]).t().contiguous())
                self.b_in = nn.Parameter(torch.cat([pi_layers[0].bias, v_layers[0].bias]))
                # later layers: one (2, in, out) weight per layer, batched over (actor, critic)
                self.w_hidden = nn.ParameterList(
                    nn.Parameter(torch.stack([p.weight.t(), v.weight.t()]).contiguous())
                    for p, v in zip(pi_layers[1:], v_layers[1:], strict=True))
                self.b_hidden = nn.ParameterList(
                    nn.Parameter(torch.stack([p.bias, v.bias]).unsqueeze(1).contiguous())
                    for p, v in zip(pi_layers[1:], v_layers[1:], strict=True))
        else:
            self.pi_body = pi_body
            self.v_body = v_body
        if not discrete:
            self.log_std = nn.Parameter(torch.full((act_dim,), float(log_std_init)))

    def _hidden(self) -> zip[tuple[torch.Tensor, torch.Tensor]]:
        """(weight, bias) of the batched hidden layers.

        Read from the lists' parameter dicts: indexing a ``ParameterList`` goes through ``getattr`` per item
        (~15 us per forward here).
        """
        mods: dict[str, Any] = self._modules
        return zip(mods["w_hidden"]._parameters.values(), mods["b_hidden"]._parameters.values(), strict=True)

    def _bodies(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Actor and critic features of a batch, computed together."""
        act = self.act_fn
        own: dict[str, Any] = self._parameters  # dict reads: an nn.Module attribute lookup is a call
        h = act(torch.addmm(own["b_in"], obs, own["w_in"]))
        h = h.view(obs.shape[0], 2, -1).transpose(0, 1)  # (2, B, hidden): actor, critic
        for w, b in self._hidden():
            h = act(torch.baddbmm(b, h, w))
        return h[0], h[1]

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Policy output and value of a batch."""
        if self.fused:
            h_pi, h_v = self._bodies(obs)
            heads: dict[str, Any] = self._modules
            pi, v = heads["pi_head"]._parameters, heads["v_head"]._parameters
            linear = nn.functional.linear  # the heads' modules, without the module-call overhead
            return linear(h_pi, pi["weight"], pi["bias"]), linear(h_v, v["weight"], v["bias"]).squeeze(-1)
        h_pi = self.pi_body(obs)
        h_v = h_pi if self.shared else self.v_body(obs)
        return self.pi_head(h_pi), self.v_head(h_v).squeeze(-1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values of a batch."""
        if self.fused:
            width = self.b_in.shape[0] // 2
            h = self.act_fn(torch.addmm(self.b_in[width:], obs, self.w_in[:, width:]))
            for w, b in self._hidden():
                h = self.act_fn(torch.addmm(b[1], h, w[1]))
            return self.v_head(h).squeeze(-1)
        return self.v_head(self.v_body(obs)).squeeze(-1)


def _np_elu(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))


def _np_silu(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


#: The activations the numpy forward pass has (``gelu`` needs ``erf``: those networks act through torch).
_NP_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh, "relu": lambda x: np.maximum(x, 0), "elu": _np_elu, "silu": _np_silu,
}


class NumpyForward:
    """A fused :class:`ActorCritic`'s forward pass in numpy, on views of its parameters (CPU, float32).

    Rollouts act on a few observations at a time, where each torch op costs several times its arithmetic in
    dispatch; numpy runs the same layers on the same memory in about a quarter of the time (docs/benchmarks.md).
    The views share the parameters' storage, so optimizer steps and loaded weights (both in place) show through
    without a copy; a parameter moved to new storage (``param.data = ...``) is noticed by its address and the
    views are retaken. Results equal torch's to float32 rounding (another BLAS sums in another order).
    """

    def __init__(self, net: ActorCritic, activation: str) -> None:
        self.net, self.act_fn = net, _NP_FUNCTIONS[activation]
        self.params = list(net.parameters())
        self.ptrs: tuple[int, ...] = ()

    @staticmethod
    def supports(net: nn.Module, activation: str) -> bool:
        """Whether ``net`` can act through numpy: a fused MLP actor-critic of float32 CPU parameters."""
        return (isinstance(net, ActorCritic) and net.fused and activation in _NP_FUNCTIONS
                and all(p.device.type == "cpu" and p.dtype == torch.float32 for p in net.parameters()))

    def _views(self) -> None:
        net = self.net
        view = lambda p: p.detach().numpy()  # noqa: E731
        self.w_in, self.b_in = view(net.w_in), view(net.b_in)
        self.hidden = [(view(w), view(b)) for w, b in net._hidden()]
        self.pi_w, self.pi_b = view(net.pi_head.weight).T, view(net.pi_head.bias)
        self.v_w, self.v_b = view(net.v_head.weight)[0], view(net.v_head.bias)  # [hidden], [1]: views
        self.log_std = view(net.log_std) if not net.discrete else None
        self.ptrs = tuple(p.data_ptr() for p in self.params)

    def __call__(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Policy output (logits or means) ``[B, A]`` and values ``[B]`` of a float32 batch ``[B, D]``."""
        if tuple(map(torch.Tensor.data_ptr, self.params)) != self.ptrs:
            self._views()
        act = self.act_fn
        h = act(obs @ self.w_in + self.b_in)
        h = h.reshape(obs.shape[0], 2, -1).transpose(1, 0, 2)  # (2, B, hidden): actor, critic
        for w, b in self.hidden:
            h = act(np.matmul(h, w) + b)
        return h[0] @ self.pi_w + self.pi_b, h[1] @ self.v_w + self.v_b


class CNNActorCritic(nn.Module):
    """A shared Nature-DQN CNN, then one linear policy head and one linear value head (image observations).

    Takes ``[B, C, H, W]`` batches in pixel units (``uint8`` as stored; the CNN scales them on its device).
    """

    def __init__(self, shape: tuple[int, ...], act_dim: int, *, discrete: bool, features: int, ortho: bool,
                 log_std_init: float) -> None:
        super().__init__()
        from rlightning_core.policy.encoders import NatureCNN

        self.discrete = discrete
        self.encoder = NatureCNN(shape, features, ortho=ortho)
        self.pi_head = _layer(features, act_dim, 0.01, ortho)
        self.v_head = _layer(features, 1, 1.0, ortho)
        if not discrete:
            self.log_std = nn.Parameter(torch.full((act_dim,), float(log_std_init)))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Policy output and value of a batch."""
        h = self.encoder(obs)
        return self.pi_head(h), self.v_head(h).squeeze(-1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values of a batch."""
        return self.v_head(self.encoder(obs)).squeeze(-1)


_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def gaussian_log_prob(actions: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor) -> torch.Tensor:
    """Log-density of a diagonal Gaussian, summed over action dimensions."""
    z = (actions - mean) * torch.exp(-log_std)
    return (-0.5 * z * z - log_std - _LOG_SQRT_2PI).sum(-1)


def gaussian_log_prob_np(actions: np.ndarray, mean: np.ndarray, log_std: np.ndarray) -> np.ndarray:
    """:func:`gaussian_log_prob` in numpy (float32 in, float32 out), for acting."""
    z = (actions - mean) * np.exp(-log_std)
    return (np.float32(-0.5) * z * z - log_std - np.float32(_LOG_SQRT_2PI)).sum(-1)


def gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    """Entropy of a diagonal Gaussian (independent of the mean)."""
    return (0.5 + _LOG_SQRT_2PI + log_std).sum(-1)


def multi_categorical_log_prob(logits: torch.Tensor, actions: torch.Tensor, nvec: tuple[int, ...]
                               ) -> tuple[torch.Tensor, Callable[[], torch.Tensor]]:
    """Factorised categorical over ``len(nvec)`` dimensions: ``logits`` ``[B, sum(nvec)]``, ``actions`` ``[B, k]``.

    Returns the log-probabilities summed over dimensions and a function giving the mean (over the batch) of the
    entropy summed over dimensions. Equal ``nvec`` entries take one ``log_softmax`` over a ``[B, k, n]`` view.
    """
    idx = actions.long()
    if len(set(nvec)) == 1:
        logp_all = torch.log_softmax(logits.reshape(logits.shape[0], len(nvec), nvec[0]), -1)
        logp = logp_all.gather(-1, idx.unsqueeze(-1)).squeeze(-1).sum(-1)
        return logp, lambda: -(logp_all.exp() * logp_all).sum((-2, -1)).mean()
    parts = [torch.log_softmax(x, -1) for x in logits.split(list(nvec), -1)]
    logp = torch.stack([p.gather(-1, idx[:, i : i + 1]).squeeze(-1) for i, p in enumerate(parts)], -1).sum(-1)
    return logp, lambda: torch.stack([-(p.exp() * p).sum(-1) for p in parts], -1).sum(-1).mean()


def bernoulli_log_prob(logits: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, Callable[[], torch.Tensor]]:
    """Independent Bernoulli bits with ``P(bit = 1) = sigmoid(logit)``: ``logits`` and ``actions`` ``[B, n]``.

    Returns the log-probabilities summed over bits and a function giving the mean entropy (summed over bits).
    """
    log_p1 = nn.functional.logsigmoid(logits)  # log sigmoid(x)
    log_p0 = nn.functional.logsigmoid(-logits)  # log (1 - sigmoid(x)), stable for large |x|
    bits = actions.to(logits.dtype)
    logp = (bits * log_p1 + (1 - bits) * log_p0).sum(-1)
    return logp, lambda: -(log_p1.exp() * log_p1 + log_p0.exp() * log_p0).sum(-1).mean()
class DictActorCritic(nn.Module):
    """Dict observations (a :class:`~rlightning_core.spaces.FlatDict`): one encoder per key, concatenated.

    Flat keys go through an MLP (``hidden_sizes``, ``activation``; ``uint8`` keys scaled by 1/255), channels-first
    ``uint8`` image keys of at least 36x36 pixels through the Nature-DQN CNN (smaller images count as flat
    keys). The ``action_mask`` key is not encoded (the policy masks the logits with it). The concatenated
    features, shared by actor and critic, feed one linear policy head and one linear value head. Input: the flat
    float32 batch ``[B, n]``.
    """

    def __init__(self, space: Any, act_dim: int, *, discrete: bool, hidden_sizes: list[int], activation: str,
                 features: int, ortho: bool, log_std_init: float) -> None:
        super().__init__()
        from rlightning_core.policy.encoders import NatureCNN
        from rlightning_core.spaces import ACTION_MASK

        self.discrete = discrete
        self.encoders = nn.ModuleDict()
        self.slices: dict[str, tuple[slice, tuple[int, ...], float]] = {}
        width = 0
        for key in space.keys:
            if key == ACTION_MASK:
                continue
            _off, size, shape, dtype = space.layout[key]
            scale = 1 / 255 if dtype == np.uint8 else 1.0
            if len(shape) == 3 and dtype == np.uint8 and min(shape[1:]) >= 36:
                enc: nn.Module = NatureCNN(shape, features, ortho=ortho)  # scales by 1/255 itself
                out, scale, view = features, 1.0, shape
            else:
                enc, out = mlp_body(size, hidden_sizes, activation, ortho)
                view = (size,)
            self.encoders[key] = enc
            self.slices[key] = (space.columns(key), view, scale)
            width += out
        if not self.slices:
            raise ValueError(f"the Dict observations {space.dict_space} hold nothing to encode besides the mask")
        self.pi_head = _layer(width, act_dim, 0.01, ortho)
        self.v_head = _layer(width, 1, 1.0, ortho)
        if not discrete:
            self.log_std = nn.Parameter(torch.full((act_dim,), float(log_std_init)))

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """The concatenated per-key features of a flat batch."""
        parts = []
        for key, (cols, view, scale) in self.slices.items():
            x = obs[:, cols].reshape(obs.shape[0], *view)
            parts.append(self.encoders[key](x * scale if scale != 1.0 else x))
        return torch.cat(parts, -1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Policy output and value of a batch."""
        h = self.features(obs)
        return self.pi_head(h), self.v_head(h).squeeze(-1)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values of a batch."""
        return self.v_head(self.features(obs)).squeeze(-1)


#: Logit given to illegal actions: exp() of it is exactly 0 in float32, and 0 * it stays finite (entropy).
MASKED_LOGIT = -1e9


def mask_logits(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``logits`` with illegal actions (``mask`` false) set to :data:`MASKED_LOGIT` (no-op without a mask)."""
    return logits if mask is None else logits.masked_fill(~mask, MASKED_LOGIT)
