"""Observation encoders shared by policy plugins: the Nature-DQN CNN for images, an MLP for flat vectors.

An *image space* is a 3-D ``Box`` of ``uint8`` laid out channels-first ``(C, H, W)`` (e.g. ``(4, 84, 84)`` for
stacked Atari frames). Images stay ``uint8`` from the env to the buffers and onto the learner's device;
:class:`NatureCNN` converts them to float and scales them to ``[0, 1]`` inside ``forward``, on whatever device
the batch is on, so host memory and transfers carry one byte per pixel.

``make_encoder(observation_space, kind)`` picks the encoder: ``auto`` takes the CNN for image spaces and the
MLP for everything else; ``cnn`` / ``mlp`` force one (a policy's ``encoder`` param).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["ENCODERS", "MLP", "NatureCNN", "encoder_kind", "is_image_space", "make_encoder"]

#: The values of a policy's ``encoder`` param.
ENCODERS = ("auto", "mlp", "cnn")

_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU, "silu": nn.SiLU,
}


def is_image_space(space: Any) -> bool:
    """Whether ``space`` is a channels-first ``uint8`` image ``Box`` of shape ``(C, H, W)``."""
    from gymnasium import spaces

    return isinstance(space, spaces.Box) and len(space.shape) == 3 and space.dtype == np.uint8


def encoder_kind(space: Any, kind: str = "auto", *, who: str = "policy.params.encoder") -> str:
    """``cnn`` or ``mlp`` for ``space`` and the requested ``kind`` (``auto`` | ``cnn`` | ``mlp``).

    Raises:
        UserError: ``kind`` is unknown, or the CNN does not fit the observations (not ``(C, H, W)``, or
            smaller than 36x36 pixels).
    """
    from rlightning_core.errors import UserError

    if kind not in ENCODERS:
        raise UserError(f"{who}: must be one of {', '.join(ENCODERS)}, got {kind!r}")
    if kind == "auto":
        kind = "cnn" if is_image_space(space) else "mlp"
    if kind == "mlp":
        return kind
    shape = tuple(getattr(space, "shape", None) or ())
    if len(shape) != 3:
        raise UserError(f"{who}: 'cnn' needs channels-first image observations (C, H, W), got the space "
                        f"{space}; use encoder: mlp (or auto) for flat observations")
    if min(shape[1:]) < 36:
        raise UserError(f"{who}: the Nature-DQN CNN needs images of at least 36x36 pixels (its convolutions "
                        f"shrink them 8x), the observations are {shape}; resize them (e.g. the gymnasium "
                        "ResizeObservation wrapper) or set encoder: mlp")
    return kind


class NatureCNN(nn.Module):
    """The convolutional torso of Mnih et al. (2015): three ReLU conv layers and a 512-unit ReLU layer.

    Conv 32 filters 8x8 stride 4, conv 64 4x4 stride 2, conv 64 3x3 stride 1, then a linear layer of
    ``features`` units. Input: ``[B, C, H, W]`` in pixel units (``uint8``, or float in ``[0, 255]``), divided
    by 255 in ``forward``. The three convolutions need images of at least 36x36 pixels.

    Args:
        shape: ``(C, H, W)`` of one observation.
        features: width of the output layer.
        ortho: orthogonal initialization with gain ``sqrt(2)`` and zero biases (CleanRL's Atari PPO).
    """

    def __init__(self, shape: tuple[int, ...], features: int = 512, *, ortho: bool = False) -> None:
        super().__init__()
        if len(shape) != 3:
            raise ValueError(f"NatureCNN needs (C, H, W) observations, got shape {tuple(shape)}")
        c, h, w = (int(d) for d in shape)
        if min(h, w) < 36:
            raise ValueError(f"NatureCNN needs images of at least 36x36 pixels (its three convolutions shrink "
                             f"them 8x), got {h}x{w}; resize the observations or use encoder: mlp")
        self.convs = nn.Sequential(
            nn.Conv2d(c, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = int(self.convs(torch.zeros(1, c, h, w)).shape[1])
        self.fc = nn.Linear(flat, features)
        self.features = features
        if ortho:
            for m in self.modules():
                if isinstance(m, nn.Conv2d | nn.Linear):
                    nn.init.orthogonal_(m.weight, math.sqrt(2))
                    nn.init.zeros_(m.bias)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Features ``[B, features]`` of a batch of images in pixel units.

        The batch is laid out channels-last (NHWC) before the convolutions: oneDNN's CPU convolutions run
        faster on it (docs/benchmarks.md, Atari throughput); the result is the same up to float rounding.
        """
        if obs.dim() == 4:
            obs = obs.contiguous(memory_format=torch.channels_last)  # on the uint8 batch: the cheap copy
        x = obs.to(torch.float32) / 255.0
        return torch.relu(self.fc(self.convs(x)))


class MLP(nn.Sequential):
    """Flatten, then ``Linear`` + activation per hidden size (float32 input; integer input is cast)."""

    def __init__(self, in_dim: int, hidden_sizes: list[int], activation: str = "relu") -> None:
        layers: list[nn.Module] = [nn.Flatten()]
        width = int(in_dim)
        for size in hidden_sizes:
            layers += [nn.Linear(width, int(size)), _ACTIVATIONS[activation]()]
            width = int(size)
        super().__init__(*layers)
        self.features = width

    def forward(self, obs: torch.Tensor) -> torch.Tensor:  # noqa: D102 (nn.Sequential's)
        return super().forward(obs.to(torch.float32))


def make_encoder(observation_space: Any, kind: str = "auto", *, hidden_sizes: list[int] | None = None,
                 activation: str = "relu", features: int = 512, ortho: bool = False,
                 who: str = "policy.params.encoder") -> tuple[nn.Module, int]:
    """The encoder for ``observation_space`` and its output width.

    Args:
        observation_space: single-env observation space.
        kind: ``auto`` (CNN for image spaces, else MLP), ``cnn`` or ``mlp``.
        hidden_sizes: hidden widths of the MLP.
        activation: the MLP's activation.
        features: output width of the CNN.
        ortho: orthogonal initialization of the CNN.
        who: named in errors (e.g. ``policy.params.encoder``).
    """
    if encoder_kind(observation_space, kind, who=who) == "cnn":
        cnn = NatureCNN(tuple(observation_space.shape), features, ortho=ortho)
        return cnn, cnn.features
    mlp = MLP(int(np.prod(observation_space.shape)), list(hidden_sizes or []), activation)
    return mlp, mlp.features
