"""A recurrent actor-critic: MLP encoder -> LSTM/GRU core -> MLP heads, stepped one step or unrolled over a sequence.

The per-env core state travels as one flat float32 row ``[S]``: ``S = streams * parts * hidden_size`` with
``streams`` 1 (shared core) or 2 (actor, critic) and ``parts`` 2 for an LSTM (h, c) or 1 for a GRU (h).
"""

from __future__ import annotations

import itertools
import math

import torch
from rlightning_ppo.networks import _ACTIVATIONS, _layer, mlp_body
from torch import nn


def _head(width: int, sizes: list[int], out_dim: int, gain: float, activation: str, ortho: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for size in sizes:
        layers += [_layer(width, size, math.sqrt(2), ortho), _ACTIVATIONS[activation]()]
        width = size
    return nn.Sequential(*layers, _layer(width, out_dim, gain, ortho))


class _Stream(nn.Module):
    """One encoder and one core."""

    def __init__(self, obs_dim: int, hidden_sizes: list[int], activation: str, core: str, hidden_size: int,
                 ortho: bool) -> None:
        super().__init__()
        self.encoder, width = mlp_body(obs_dim, hidden_sizes, activation, ortho)
        self.core: nn.LSTM | nn.GRU = (nn.LSTM if core == "lstm" else nn.GRU)(width, hidden_size)
        if ortho:
            for name, param in self.core.named_parameters():
                if name.startswith("weight"):
                    nn.init.orthogonal_(param, 1.0)
                else:
                    nn.init.zeros_(param)


class RecurrentActorCritic(nn.Module):
    """``step`` acts on one observation batch with its state; ``unroll`` replays sequences with reset masks."""

    def __init__(self, obs_dim: int, act_dim: int, *, discrete: bool, hidden_sizes: list[int], activation: str,
                 core: str, hidden_size: int, head_sizes: list[int], shared_core: bool, ortho: bool,
                 log_std_init: float) -> None:
        super().__init__()
        self.discrete = discrete
        self.lstm = core == "lstm"
        self.hidden_size = hidden_size
        self.parts = 2 if self.lstm else 1
        n_streams = 1 if shared_core else 2
        self.streams = nn.ModuleList(
            _Stream(obs_dim, hidden_sizes, activation, core, hidden_size, ortho) for _ in range(n_streams))
        self.pi_head = _head(hidden_size, head_sizes, act_dim, 0.01, activation, ortho)
        self.v_head = _head(hidden_size, head_sizes, 1, 1.0, activation, ortho)
        if not discrete:
            self.log_std = nn.Parameter(torch.full((act_dim,), float(log_std_init)))

    @property
    def state_size(self) -> int:
        """Floats of one env's state row."""
        return len(self.streams) * self.parts * self.hidden_size

    def _split(self, state: torch.Tensor) -> list[list[torch.Tensor]]:
        """``[B, S]`` -> per stream, its parts as contiguous ``[1, B, H]`` (the layout torch's cores take)."""
        b = state.shape[0]
        s = state.reshape(b, len(self.streams), self.parts, self.hidden_size)
        return [[s[:, i, j].unsqueeze(0).contiguous() for j in range(self.parts)] for i in range(len(self.streams))]

    def _join(self, parts: list[list[torch.Tensor]]) -> torch.Tensor:
        b = parts[0][0].shape[1]
        return torch.stack([torch.stack([p[0] for p in stream], 1) for stream in parts], 1).reshape(b, -1)

    def _core(self, stream: _Stream, x: torch.Tensor, parts: list[torch.Tensor]
              ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        if self.lstm:
            out, (h, c) = stream.core(x, (parts[0], parts[1]))
            return out, [h, c]
        out, h = stream.core(x, parts[0])
        return out, [h]

    def _heads(self, feats: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pi_head(feats[0]), self.v_head(feats[-1]).squeeze(-1)

    def step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step of a ``[B, D]`` batch from ``[B, S]`` states: (policy output, value, next state)."""
        feats, new = [], []
        for stream, parts in zip(self.streams, self._split(state), strict=True):
            out, parts = self._core(stream, stream.encoder(obs).unsqueeze(0), parts)
            feats.append(out[0])
            new.append(parts)
        pi, v = self._heads(feats)
        return pi, v, self._join(new)

    def value(self, obs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """Values of a ``[B, D]`` batch from ``[B, S]`` states."""
        feats = []
        for stream, parts in zip(self.streams, self._split(state), strict=True):
            feats.append(self._core(stream, stream.encoder(obs).unsqueeze(0), parts)[0][0])
        return self.v_head(feats[-1]).squeeze(-1)

    def unroll(self, obs: torch.Tensor, state: torch.Tensor, starts: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Replay ``[L, B, D]`` sequences from their first step's states ``[B, S]``.

        ``starts[t]`` (``[L, B]`` bool) marks steps that begin an episode: the state is zeroed before them, as
        the env runner resets it. Returns policy outputs ``[L * B, A]`` and values ``[L * B]`` in ``(t, b)``
        order.
        """
        length, b = obs.shape[0], obs.shape[1]
        keep = (~starts).to(obs.dtype).unsqueeze(-1)  # [L, B, 1]
        # the core runs over the stretches between the steps where some env starts an episode, one call each
        cuts = [0, *(torch.nonzero(starts[1:].any(-1)).flatten() + 1).tolist(), length]
        feats = []
        for stream, parts in zip(self.streams, self._split(state), strict=True):
            x = stream.encoder(obs.reshape(length * b, -1)).reshape(length, b, -1)
            outs = []
            for t0, t1 in itertools.pairwise(cuts):
                parts = [p * keep[t0] for p in parts]
                o, parts = self._core(stream, x[t0:t1], parts)
                outs.append(o)
            feats.append(torch.cat(outs).reshape(length * b, -1))
        return self._heads(feats)
