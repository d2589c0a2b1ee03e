"""Node-local shared weight slots: one copy of the weights per node, in shared memory.

The ``node_shared`` weight-sync strategy writes the learner's weights once per node into a memory-mapped file
under ``/dev/shm`` (RAM-backed; the temp dir where there is none); every rollout worker on that node copies
them from there into its own parameters. The network carries one copy per node instead of one per worker,
and a worker's pause is one memory copy.

Two slots alternate by version (``version % 2``), so a reader of version ``v`` never sees the writer of
``v + 1`` overwrite what it is reading (with one slot, readers starve under a fast writer).
The file layout follows a :class:`~rlightning_core.weights.buckets.BucketLayout`; both ends compute the same
layout from the same policy, and the layout signature is part of the file name.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from rlightning_core.weights.buckets import BucketLayout

__all__ = ["SharedWeightSlots", "shm_dir"]

_ALIGN = 64


def shm_dir() -> str:
    """``/dev/shm`` where it exists (Linux), else the temp dir."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def _np_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty(0, dtype=dtype).numpy().dtype


class SharedWeightSlots:
    """Two memory-mapped copies of a layout's buckets in one file per node.

    Args:
        token: names the run (the same on every worker of the run).
        layout: the bucket layout of the policy's tensors.
    """

    def __init__(self, token: str, layout: BucketLayout) -> None:
        self.layout = layout
        self.offsets: list[int] = []
        pos = 0
        for n, d in zip(layout.sizes, layout.dtypes, strict=True):
            self.offsets.append(pos)
            pos += -(-n * torch.empty((), dtype=d).element_size() // _ALIGN) * _ALIGN
        self.slot_bytes = max(pos, _ALIGN)
        self.path = os.path.join(shm_dir(), f"rlightning-weights-{token}-{layout.signature}")
        size = 2 * self.slot_bytes
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)  # the same size from every process: idempotent
            if hasattr(os, "posix_fallocate"):
                try:  # allocate the pages now: a first sync would otherwise pay for zeroing them
                    os.posix_fallocate(fd, 0, size)
                except OSError:
                    pass
        finally:
            os.close(fd)
        mapped: Any = np.memmap(self.path, dtype=np.uint8, mode="r+", shape=(size,))
        self._mm: Any = mapped
        populate = getattr(mmap, "MADV_POPULATE_WRITE", None)
        try:  # and map them into this process up front, without changing a byte (the slots may hold weights)
            if populate is not None:  # Linux >= 5.14
                mapped._mmap.madvise(populate)
            else:
                int(self._mm[:: mmap.PAGESIZE].sum())  # one read per page
        except (OSError, AttributeError, ValueError):
            pass
        self.slots = [[self._view(slot, i) for i in range(len(layout.sizes))] for slot in range(2)]

    def _view(self, slot: int, index: int) -> torch.Tensor:
        n, dtype = self.layout.sizes[index], self.layout.dtypes[index]
        start = slot * self.slot_bytes + self.offsets[index]
        nbytes = n * torch.empty((), dtype=dtype).element_size()
        return torch.from_numpy(self._mm[start: start + nbytes].view(_np_dtype(dtype)))

    def write(self, flats: Sequence[torch.Tensor], version: int) -> None:
        """Copy flattened buckets (as ``BucketLayout.flatten_in_place`` makes them) into slot ``version % 2``."""
        with torch.no_grad():
            for dst, src in zip(self.slots[version % 2], flats, strict=True):
                dst.copy_(src)

    def write_named(self, weights: Mapping[str, Any], version: int) -> None:
        """Copy ``name -> array`` weights (as ``BasePolicy.get_weights`` returns them) into the slot."""
        with torch.no_grad():
            for dst, entries in zip(self.slots[version % 2], self.layout.buckets, strict=True):
                for name, offset, numel, _ in entries:
                    dst[offset: offset + numel].copy_(torch.as_tensor(np.asarray(weights[name])).reshape(-1))

    def read(self, flats: Sequence[torch.Tensor], version: int) -> None:
        """Copy slot ``version % 2`` into flattened buckets, in place."""
        with torch.no_grad():
            for dst, src in zip(flats, self.slots[version % 2], strict=True):
                dst.copy_(src)

    def close(self, unlink: bool = False) -> None:
        """Drop the mapping; ``unlink`` removes the file (readers that still map it keep their pages)."""
        self.slots = []
        mm, self._mm = self._mm, None
        if mm is not None and getattr(mm, "_mmap", None) is not None:
            try:
                mm._mmap.close()
            except BufferError:  # a view is still alive somewhere: the mapping goes with it
                pass
        if unlink:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
