"""Torch versions of the built-in observation preprocessors, for ``rlightning export`` (imported lazily).

Each computes what its preprocessor's ``obs(batch, update=False)`` computes, in the same precision, so an
exported policy acts on exactly the inputs the trained policy saw.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["ClipObsModule", "NormalizeObsModule"]


class NormalizeObsModule(nn.Module):
    """``clip((obs - mean) / std, -clip, clip)`` in float64, returned as float32 (as :class:`NormalizeObs`)."""

    def __init__(self, mean: np.ndarray, std: np.ndarray, clip: float) -> None:
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(np.asarray(mean, dtype=np.float64)))
        self.register_buffer("std", torch.as_tensor(np.asarray(std, dtype=np.float64)))
        self.clip = float(clip)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Normalize a batch ``[N, *shape]``."""
        out = (obs.to(torch.float64) - self.mean) / self.std
        return out.clamp(-self.clip, self.clip).to(torch.float32)


class ClipObsModule(nn.Module):
    """``clip(obs, low, high)`` as float32 (as :class:`ClipObs`)."""

    def __init__(self, low: Any, high: Any) -> None:
        super().__init__()
        self.register_buffer("low", torch.as_tensor(np.asarray(low, dtype=np.float32)))
        self.register_buffer("high", torch.as_tensor(np.asarray(high, dtype=np.float32)))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Clip a batch."""
        return torch.minimum(torch.maximum(obs.to(torch.float32), self.low), self.high)
