"""Preallocated tensor storage shared by the builtin buffers, and the :class:`Storage` protocol.

A :class:`ReplayBuffer <rlightning_core.buffer.replay.ReplayBuffer>` is composed like TorchRL's: a storage
(where transitions live, and the circular writer) and a sampler (which indices to read). Any object with the
:class:`Storage` methods can replace :class:`TensorStorage` — e.g. a memory-mapped or compressed storage.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

__all__ = ["Layout", "Storage", "TensorStorage", "as_tensor", "space_layout", "torch_dtype"]

#: Field name -> (per-item shape, torch dtype).
Layout = dict[str, tuple[tuple[int, ...], torch.dtype]]


def torch_dtype(np_dtype: Any) -> torch.dtype:
    """The torch dtype of a numpy dtype (``np.float32`` -> ``torch.float32``)."""
    return torch.from_numpy(np.zeros(0, dtype=np.dtype(np_dtype))).dtype


def space_layout(space: Any, *, role: str) -> tuple[tuple[int, ...], torch.dtype]:
    """Per-item shape and storage dtype of a Gymnasium space.

    Discrete / MultiDiscrete (and MultiBinary actions) are stored as int64 — what embedding lookups,
    ``gather`` and ``Categorical.log_prob`` take; ``uint8`` Boxes (images) as uint8, one byte per pixel (the
    policy converts them to float on its device); everything else as float32.

    Args:
        space: a ``gymnasium.spaces`` instance (single env).
        role: ``"obs"`` or ``"actions"``, named in errors.
    """
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return (), torch.int64
    if isinstance(space, spaces.MultiDiscrete):
        return tuple(space.shape), torch.int64
    if isinstance(space, spaces.MultiBinary):
        return tuple(space.shape), torch.int64 if role == "actions" else torch.float32
    if isinstance(space, spaces.Box):
        return tuple(space.shape), torch.uint8 if space.dtype == np.uint8 else torch.float32
    raise TypeError(
        f"cannot store {role} of space {space!r}: the builtin buffers support Box, Discrete, MultiDiscrete "
        f"and MultiBinary spaces; flatten composite spaces (gymnasium.wrappers.FlattenObservation) first"
    )


def as_tensor(array: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A tensor sharing ``array``'s memory, for reading only (read-only numpy arrays from Ray are fine)."""
    if isinstance(array, torch.Tensor):
        return array
    array = np.asarray(array)
    if any(stride < 0 for stride in array.strides):  # torch cannot view reversed numpy arrays
        array = np.ascontiguousarray(array)
    if array.flags.writeable:
        return torch.from_numpy(array)
    with warnings.catch_warnings():  # we only read it: torch's "not writable" warning does not apply
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(array)


@runtime_checkable
class Storage(Protocol):
    """What a replay buffer needs from its storage."""

    @property
    def capacity(self) -> int:
        """Items the storage holds at most."""
        ...

    @property
    def device(self) -> torch.device:
        """Where :meth:`get` returns tensors."""
        ...

    def __len__(self) -> int:
        """Items currently stored."""
        ...

    def write(self, data: Mapping[str, np.ndarray | torch.Tensor]) -> np.ndarray:
        """Append a batch (first axis = items, oldest overwritten); return the indices written, in order."""
        ...

    def get(self, indices: torch.Tensor) -> dict[str, torch.Tensor]:
        """Items at ``indices`` (int64, on :attr:`device`), one tensor per field."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Contents and cursor (tensors and ints)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        ...


class TensorStorage:
    """Fixed-capacity circular storage: one preallocated tensor ``[capacity, *shape]`` per field.

    :meth:`write` copies a whole batch with at most two slice copies per field (one when it wraps around the
    end), so inserting thousands of transitions costs a handful of ``copy_`` calls, not a Python loop.

    Args:
        capacity: items kept; once full, each write overwrites the oldest items.
        layout: field name -> (per-item shape, torch dtype).
        device: device of the tensors (the learner's, so that sampling needs no host copies).
    """

    def __init__(self, capacity: int, layout: Layout, device: str | torch.device = "cpu") -> None:
        if capacity < 1:
            raise ValueError(f"storage capacity must be >= 1, got {capacity}")
        self._capacity = int(capacity)
        self._device = torch.device(device)
        self.layout = dict(layout)
        self.tensors: dict[str, torch.Tensor] = {
            name: torch.zeros((self._capacity, *shape), dtype=dtype, device=self._device)
            for name, (shape, dtype) in self.layout.items()
        }
        self.cursor = 0
        self.size = 0
        # numpy views of CPU tensors: writing a few rows of a numpy batch through them costs a slice assignment
        # per field, a fraction of torch's per-op dispatch (off-policy runs write one env step at a time)
        self._arrays: dict[str, np.ndarray] = {}
        if self._device.type == "cpu":
            for name, t in self.tensors.items():
                try:
                    self._arrays[name] = t.numpy()
                except TypeError:  # a dtype numpy lacks (bfloat16): written through torch
                    pass

    @property
    def capacity(self) -> int:
        """Items the storage holds at most."""
        return self._capacity

    @property
    def device(self) -> torch.device:
        """Device of the stored tensors."""
        return self._device

    def __len__(self) -> int:
        return self.size

    def write(self, data: Mapping[str, np.ndarray | torch.Tensor]) -> np.ndarray:
        """Append ``data`` (every field of :attr:`layout`, first axis = items); return the indices written.

        Only the last ``capacity`` items of an oversized batch are kept (the earlier ones would be overwritten
        by the same write anyway).
        """
        missing = set(self.layout) - set(data)
        if missing:
            raise KeyError(f"write() lacks fields {sorted(missing)}; storage layout: {sorted(self.layout)}")
        n = int(next(iter(data.values())).shape[0]) if data else 0
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        skip = max(0, n - self._capacity)
        count = n - skip
        start = (self.cursor + skip) % self._capacity
        first = min(count, self._capacity - start)
        for name, dst in self.tensors.items():
            src = data[name]
            src = src if isinstance(src, torch.Tensor) else np.asarray(src)
            if src.shape[0] != n:
                raise ValueError(f"field {name!r} has {src.shape[0]} items, expected {n} like the others")
            src = src[skip:]
            arr = self._arrays.get(name)
            if arr is not None and isinstance(src, np.ndarray):
                dst = arr  # numpy slice assignment casts as copy_ does
            else:
                src = as_tensor(src)  # a tensor slice assignment is a copy_ (across devices too)
            dst[start : start + first] = src[:first].reshape(first, *dst.shape[1:])
            if first < count:
                dst[: count - first] = src[first:].reshape(count - first, *dst.shape[1:])
        self.cursor = (start + count) % self._capacity
        self.size = min(self.size + count, self._capacity)
        return (start + np.arange(count, dtype=np.int64)) % self._capacity

    def get(self, indices: torch.Tensor) -> dict[str, torch.Tensor]:
        """Gather items at ``indices`` from every field."""
        indices = indices.to(self._device)
        return {name: torch.index_select(t, 0, indices) for name, t in self.tensors.items()}

    def state_dict(self) -> dict[str, Any]:
        """The filled rows of every field (clones), ``cursor``, ``size`` and ``capacity``."""
        return {
            "tensors": {name: t[: self.size].clone() for name, t in self.tensors.items()},
            "cursor": self.cursor,
            "size": self.size,
            "capacity": self._capacity,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (same capacity and fields required)."""
        if int(state["capacity"]) != self._capacity:
            raise ValueError(
                f"checkpointed storage has capacity {state['capacity']}, this one {self._capacity}; "
                f"set buffer.params.capacity to {state['capacity']} to resume"
            )
        size = int(state["size"])
        for name, t in self.tensors.items():
            if name not in state["tensors"]:
                have = sorted(state["tensors"])
                raise KeyError(f"checkpointed storage has no field {name!r} (it has {have})")
            t[:size].copy_(state["tensors"][name])
        self.size = size
        self.cursor = int(state["cursor"])
