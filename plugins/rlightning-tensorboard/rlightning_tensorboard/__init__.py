"""TensorBoard logging for rlightning: the ``tensorboard`` logger component.

Importing this package is cheap; torch's ``SummaryWriter`` is imported when a logger is created.
"""

from __future__ import annotations

from rlightning_tensorboard.logger import TensorBoardLogger
from rlightning_tensorboard.params import TensorBoardParams

__all__ = ["TensorBoardLogger", "TensorBoardParams"]
