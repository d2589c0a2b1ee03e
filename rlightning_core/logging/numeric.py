"""Numeric metrics for logger plugins: which values a scalar tracker can take, and a warn-once filter.

Trackers (TensorBoard, W&B, MLflow, SwanLab, ...) accept numbers only; a metric row may also carry strings or
arrays. Every logger plugin needs the same rule, so it lives here: real numbers and 0-d arrays / tensors
become floats, anything else is left out with one warning per metric name.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Mapping
from typing import Any

__all__ = ["NumericMetrics", "as_float"]

log = logging.getLogger("rlightning.logging")


def as_float(value: Any) -> float | None:
    """``float(value)`` for real numbers (and 0-d arrays / tensors), ``None`` for anything else."""
    if isinstance(value, numbers.Real):
        return float(value)
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        item = value.item()
        if isinstance(item, numbers.Real):
            return float(item)
    return None


class NumericMetrics:
    """Keeps the numeric metrics of a row as floats; warns once per metric name that is not a number.

    Args:
        logger_name: the logger's name in the warning (``"wandb logger"``).
    """

    def __init__(self, logger_name: str) -> None:
        self.logger_name = logger_name
        self.skipped: set[str] = set()
        """Names of the metrics left out so far."""

    def __call__(self, metrics: Mapping[str, Any]) -> dict[str, float]:
        """``{name: float}`` of the numeric metrics of ``metrics``, in their order."""
        row: dict[str, float] = {}
        for key, value in metrics.items():
            number = as_float(value)
            if number is None:
                if key not in self.skipped:
                    self.skipped.add(key)
                    log.warning("%s: metric %r is not a number (%s), not logged", self.logger_name, key,
                                type(value).__name__)
                continue
            row[key] = number
        return row
