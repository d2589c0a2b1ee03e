"""Pieces shared by the Ray execution's parts: the failure error, metric averaging, sync constants."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlightning_core.config.checks import SYNC_ENGINES
from rlightning_core.errors import RlightningError

__all__ = ["REPLY_SYNC_MAX_BYTES", "SYNC_ENGINES", "PackedWeights", "WorkerFailure",
           "collective_backend", "get", "mean_metrics", "pack_weights", "strip_private",
           "unpack_weights"]


#: ``weight_sync: auto`` on CPU learners: weights up to this size ride the learner's reply (no collective).
REPLY_SYNC_MAX_BYTES = 1 << 20


def collective_backend(requested: str, devices: list[str]) -> tuple[str, str]:
    """The torch.distributed backend for a group whose ranks hold their weights on ``devices``, and why.

    ``devices``: each rank's ``cpu`` or ``cuda:<uuid>`` (:meth:`CollectiveMember.sync_device`). ``auto`` picks
    nccl only when every rank has a GPU of its own: NCCL broadcasts GPU tensors only and refuses two ranks on
    one GPU (colocated learner and rollout copies on a shared GPU), so such groups use gloo, which handles CPU
    and GPU tensors. A backend set by ``cluster.backend`` (or ``build_policy_group(backend=...)``) is kept.
    """
    if requested != "auto":
        return requested, "set by cluster.backend"
    cuda = [d for d in devices if d.startswith("cuda")]
    if not cuda:
        return "gloo", "every rank on CPU"
    if len(set(cuda)) < len(cuda):
        return "gloo", "ranks share a GPU (NCCL needs one GPU per rank)"
    if len(cuda) < len(devices):
        return "gloo", "some ranks hold their weights on CPU (NCCL broadcasts GPU tensors only)"
    return "nccl", "every rank on a GPU of its own"


class WorkerFailure(RlightningError):
    """The learner failed, or a remote call found no answer within ``cluster.call_timeout_s``.

    Workers that fail more often than ``cluster.max_restarts`` allows raise
    :class:`~rlightning_core.errors.RestartsUsedUpError` instead.
    """


def get(ray: Any, refs: Any, timeout: float, what: str) -> Any:
    """``ray.get`` within ``timeout`` seconds; a timeout is a :class:`WorkerFailure` saying what was awaited."""
    try:
        return ray.get(refs, timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise WorkerFailure(f"timed out after {timeout:.0f}s waiting to {what} (cluster.call_timeout_s / "
                            "cluster.actor_start_timeout_s; are there enough CPUs/GPUs for every actor?)") from None


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


#: Weights as one ``bytes`` blob plus ``(name, dtype, shape)`` per array, in order.
PackedWeights = tuple[tuple[tuple[str, str, tuple[int, ...]], ...], bytes]


def pack_weights(weights: dict[str, np.ndarray]) -> PackedWeights:
    """One blob for a small set of numpy weights sent inline with a call to every runner.

    Ray serializes a ``bytes`` argument with one copy, a dict of arrays array by array.
    """
    layout = tuple((k, v.dtype.str, tuple(v.shape)) for k, v in weights.items())
    return layout, b"".join(np.ascontiguousarray(v).tobytes() for v in weights.values())


def unpack_weights(packed: PackedWeights) -> dict[str, np.ndarray]:
    """The arrays of :func:`pack_weights` (read-only views of the blob; ``set_weights`` copies them)."""
    layout, blob = packed
    out: dict[str, np.ndarray] = {}
    offset = 0
    for name, dtype, shape in layout:
        dt = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        out[name] = np.frombuffer(blob, dtype=dt, count=count, offset=offset).reshape(shape)
        offset += count * dt.itemsize
    if offset != len(blob):
        raise ValueError(f"packed weights: the layout covers {offset} bytes of a {len(blob)}-byte blob")
    return out
