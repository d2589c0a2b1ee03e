"""Pieces of PPO's learn step shared with the policies built on it (``appo``): learning-rate schedule, value loss."""

from __future__ import annotations

import torch

from rlightning_ppo.params import PPOParams

__all__ = ["apply_lr", "value_loss"]


def apply_lr(optimizer: torch.optim.Optimizer, params: PPOParams, progress: float) -> float:
    """Set every group's learning rate: ``lr``, decayed linearly to 0 over training when ``anneal_lr``."""
    lr = params.lr * max(0.0, 1.0 - progress) if params.anneal_lr else params.lr
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lr


def value_loss(value: torch.Tensor, returns: torch.Tensor, old_value: torch.Tensor,
               clip_value: float | None) -> torch.Tensor:
    """PPO's value loss: the mean of ``0.5 (V - R)^2``.

    With ``clip_value``, the larger of it and that of ``V`` clipped around ``old_value`` (stored at collection).
    """
    if clip_value is None:
        return 0.5 * ((value - returns) ** 2).mean()
    v_clipped = old_value + (value - old_value).clamp(-clip_value, clip_value)
    return 0.5 * torch.max((value - returns) ** 2, (v_clipped - returns) ** 2).mean()
