"""Running mean and variance, mergeable across workers (parallel Welford; Chan, Golub & LeVeque 1979).

Two summaries ``(mean_a, var_a, n_a)`` and ``(mean_b, var_b, n_b)`` of disjoint data combine exactly::

    n     = n_a + n_b
    delta = mean_b - mean_a
    mean  = mean_a + delta * n_b / n
    M2    = var_a * n_a + var_b * n_b + delta**2 * n_a * n_b / n
    var   = M2 / n

so statistics gathered by several rollout workers merge into the same numbers one stream over all the data
would give (up to float64 rounding). Variances are population variances (``ddof=0``). The count starts at 0
(not SB3's ``1e-4`` pseudo-count) so that merging several fresh workers adds no phantom samples; with no data
the summary is ``mean=0, var=1``, i.e. normalization is the identity.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["RunningMeanStd", "batch_moments"]


def batch_moments(batch: np.ndarray, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, int] | None:
    """``(mean, var, count)`` of a batch of samples shaped ``shape`` (float64), or ``None`` for an empty batch.

    One sample (a single env's step, every step of a run) is its own mean with variance 0, exactly what
    ``mean`` / ``var`` over one row give, without their cost.
    """
    x = np.asarray(batch, dtype=np.float64).reshape((-1, *shape))
    n = x.shape[0]
    if n == 0:
        return None
    if n == 1:
        return x[0].copy(), np.zeros(shape, dtype=np.float64), 1
    return x.mean(axis=0), x.var(axis=0), n


class RunningMeanStd:
    """Mean, variance and count of a stream of arrays shaped ``[batch, *shape]``, in float64.

    Args:
        shape: shape of one sample (``()`` for scalars such as returns).
    """

    def __init__(self, shape: tuple[int, ...] = ()) -> None:
        self.shape = tuple(shape)
        self.mean = np.zeros(self.shape, dtype=np.float64)
        self.var = np.ones(self.shape, dtype=np.float64)
        self.count = 0.0

    def update(self, batch: np.ndarray) -> None:
        """Fold a batch (first axis = samples) into the statistics."""
        moments = batch_moments(batch, self.shape)
        if moments is not None:
            self.merge(*moments)

    def merge(self, other_mean: np.ndarray, other_var: np.ndarray, other_count: float) -> None:
        """Combine the summary of another, disjoint stream into this one (Chan et al.'s parallel formula)."""
        other_count = float(other_count)
        if other_count <= 0:
            return
        other_mean = np.asarray(other_mean, dtype=np.float64)
        other_var = np.asarray(other_var, dtype=np.float64)
        if self.count <= 0:
            self.mean = other_mean.copy().reshape(self.shape)
            self.var = other_var.copy().reshape(self.shape)
            self.count = other_count
            return
        count = self.count
        total = count + other_count
        delta = other_mean - self.mean
        m2 = self.var * count + other_var * other_count + delta**2 * count * other_count / total
        self.mean = self.mean + delta * other_count / total
        self.var = m2 / total
        self.count = total

    def merge_one(self, sample: np.ndarray) -> None:
        """Fold in one float64 sample shaped ``shape``: bit for bit ``merge(sample, zeros, 1)``, in fewer ops.

        With ``n_b = 1`` and ``var_b = 0`` the terms :meth:`merge` multiplies by 1 or adds as 0 are exact, so
        leaving them out changes no bit (tests/unit/test_preprocessors.py checks it); this is the per-step
        path of a single env.
        """
        if self.count <= 0:
            self.mean = sample.copy().reshape(self.shape)
            self.var = np.zeros(self.shape, dtype=np.float64)
            self.count = 1.0
            return
        count = self.count
        total = count + 1.0
        delta = sample - self.mean
        m2 = self.var * count + delta**2 * count / total
        self.mean = self.mean + delta / total
        self.var = m2 / total
        self.count = total

    def std(self, epsilon: float = 0.0) -> np.ndarray:
        """``sqrt(var + epsilon)``."""
        return np.sqrt(self.var + epsilon)

    def reset(self) -> None:
        """Forget all data."""
        self.mean = np.zeros(self.shape, dtype=np.float64)
        self.var = np.ones(self.shape, dtype=np.float64)
        self.count = 0.0

    def state_dict(self, prefix: str = "") -> dict[str, Any]:
        """``{prefix+'mean', prefix+'var', prefix+'count'}`` as numpy arrays and a float (copies)."""
        return {
            f"{prefix}mean": self.mean.copy(),
            f"{prefix}var": self.var.copy(),
            f"{prefix}count": self.count,
        }

    def load_state_dict(self, state: dict[str, Any], prefix: str = "") -> None:
        """Restore :meth:`state_dict`."""
        self.mean = np.asarray(state[f"{prefix}mean"], dtype=np.float64).reshape(self.shape).copy()
        self.var = np.asarray(state[f"{prefix}var"], dtype=np.float64).reshape(self.shape).copy()
        self.count = float(state[f"{prefix}count"])

    def __repr__(self) -> str:
        return f"RunningMeanStd(shape={self.shape}, count={self.count:g})"
