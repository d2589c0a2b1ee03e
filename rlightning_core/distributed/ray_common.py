"""Pieces shared by the Ray execution and its mixins: the failure error, metric averaging, sync constants."""

from __future__ import annotations

from typing import Any

from rlightning_core.errors import RlightningError

__all__ = ["REPLY_SYNC_MAX_BYTES", "WorkerFailure", "mean_metrics", "strip_private"]

#: ``weight_sync: auto`` on CPU learners: weights up to this size ride the learner's reply (no collective).
REPLY_SYNC_MAX_BYTES = 1 << 20


class WorkerFailure(RlightningError):
    """A worker actor failed more often than ``cluster.max_restarts`` allows, or the learner failed."""


def mean_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    """Per key, the mean over the data-parallel learners that reported it (one learner: its own dict)."""
    if len(rows) == 1:
        return dict(rows[0])
    keys = {k for row in rows for k in row}
    return {k: float(sum(row[k] for row in rows if k in row) / sum(1 for row in rows if k in row))
            for k in sorted(keys)}


def strip_private(state: dict[str, Any]) -> dict[str, Any]:
    """Statistics only: per-env running values (e.g. ScaleReward's returns) stay with each worker."""
    return {k: v for k, v in state.items() if k != "returns"}
