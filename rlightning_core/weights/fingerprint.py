"""A cheap fingerprint of a policy's weights, to check a rollout copy against the learner after a sync.

A full checksum (what data-parallel learners compare once, at start-up) reads every parameter; per sync and per
copy that is one more pass over the weights. Instead, each tensor contributes :data:`SAMPLES` elements at evenly
spaced positions (first and last included), as float64 bytes, keyed by the tensor's name. A transfer that lost,
reordered or shifted data, a copy that loaded another version, or a copy that changed its weights afterwards
shows in almost every such sample; a change to one element that no sample covers does not (that is the price
of the cheapness). Both ends compute it from their own tensors (torch) or arrays (numpy, a torch-free rollout
copy): the values agree bit for bit when the weights do. No torch at import.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["SAMPLES", "Fingerprint", "fingerprint", "fingerprint_mismatch", "policy_fingerprint"]

SAMPLES = 4
"""Elements sampled per tensor."""

#: torch dtypes (as ``str(dtype)``) whose CPU tensors are sampled through a numpy view, without torch indexing.
_NUMPY_VIEWABLE = frozenset({"torch.float16", "torch.float32", "torch.float64", "torch.int8", "torch.uint8",
                             "torch.int16", "torch.int32", "torch.int64", "torch.bool"})

#: Tensor name -> its sampled elements (float64 bytes) and shape.
Fingerprint = dict[str, tuple[bytes, tuple[int, ...]]]


@functools.lru_cache(maxsize=1024)
def _positions(numel: int) -> np.ndarray:
    return np.unique(np.linspace(0, numel - 1, num=min(SAMPLES, numel)).astype(np.int64))


def _sample(value: Any) -> tuple[bytes, tuple[int, ...]]:
    shape = tuple(int(n) for n in value.shape)
    numel = int(np.prod(shape, dtype=np.int64))
    if numel == 0:
        return b"", shape
    at = _positions(numel)
    if hasattr(value, "detach"):  # a torch tensor
        tensor = value.detach()
        if tensor.device.type != "cpu" or not tensor.is_contiguous() or str(tensor.dtype) not in _NUMPY_VIEWABLE:
            # on a device, or a dtype numpy lacks (bfloat16): gather the few elements there, then copy them
            import torch

            flat = tensor.reshape(-1)
            picked = flat[torch.as_tensor(at, device=flat.device)].to(device="cpu", dtype=torch.float64)
            return picked.numpy().tobytes(), shape
        value = tensor.numpy()  # a view of the CPU tensor's memory: sampling it copies SAMPLES elements
    return np.asarray(value).reshape(-1)[at].astype(np.float64).tobytes(), shape


def fingerprint(tensors: Mapping[str, Any]) -> Fingerprint:
    """The fingerprint of named tensors or arrays (e.g. :meth:`BasePolicy.get_weights`)."""
    return {name: _sample(tensors[name]) for name in sorted(tensors)}


def policy_fingerprint(policy: Any) -> Fingerprint:
    """The fingerprint of the weights a sync moves: the rollout modules' tensors in place, else ``get_weights()``."""
    modules = policy.rollout_modules() if hasattr(policy, "rollout_modules") else policy.modules()
    if modules:
        from rlightning_core.weights.buckets import named_tensors

        return fingerprint(named_tensors(modules))
    return fingerprint(policy.get_weights())


def fingerprint_mismatch(copy: Mapping[str, Any], learner: Mapping[str, Any]) -> list[str]:
    """Names of the tensors where a rollout copy's fingerprint differs from the learner's (``[]``: they agree).

    The copy's tensors are checked (a copy may hold a subset of the learner's modules); one the learner does not
    have counts as a difference.
    """
    return [name for name, value in copy.items() if tuple(learner.get(name, ())) != tuple(value)]
