"""Weights & Biases logging for rlightning: the ``wandb`` logger component.

Importing this package is cheap; wandb is imported when a logger is created (or an offline run is read).
"""

from __future__ import annotations

from rlightning_wandb.logger import WandbLogger
from rlightning_wandb.offline import read_offline_history
from rlightning_wandb.params import WandbParams

__all__ = ["WandbLogger", "WandbParams", "read_offline_history"]
