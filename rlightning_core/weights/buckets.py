"""Flatten a policy's tensors into size-bounded buckets for collective broadcast, and back.

Both ends compute the same :class:`BucketLayout` from their own modules (same policy class, same spaces), so
only raw bucket bytes travel; a layout signature exchanged once at setup catches any mismatch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import attrs
import torch

__all__ = ["BucketLayout", "named_tensors"]


def named_tensors(modules: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Every parameter and buffer of ``modules`` by ``module.key`` (the tensors themselves, not copies)."""
    out: dict[str, torch.Tensor] = {}
    for mname in sorted(modules):
        for key, tensor in modules[mname].state_dict(keep_vars=True).items():
            out[f"{mname}.{key}"] = tensor.data if isinstance(tensor, torch.nn.Parameter) else tensor
    return out


@attrs.define
class BucketLayout:
    """Which tensor lives where in which bucket; buckets hold one dtype each and at most ``bucket_bytes``."""

    buckets: list[list[tuple[str, int, int, tuple[int, ...]]]]
    """Per bucket: ``(name, offset, numel, shape)`` of every tensor in it."""
    dtypes: list[torch.dtype]
    sizes: list[int]
    """Elements per bucket."""

    @classmethod
    def build(cls, tensors: Mapping[str, torch.Tensor], bucket_bytes: int = 64 << 20) -> BucketLayout:
        """Group tensors by dtype (in name order) and cut into buckets of at most ``bucket_bytes``."""
        buckets: list[list[tuple[str, int, int, tuple[int, ...]]]] = []
        dtypes: list[torch.dtype] = []
        sizes: list[int] = []
        by_dtype: dict[torch.dtype, list[str]] = {}
        for name in sorted(tensors):
            by_dtype.setdefault(tensors[name].dtype, []).append(name)
        for dtype, names in by_dtype.items():
            itemsize = torch.empty((), dtype=dtype).element_size()
            current: list[tuple[str, int, int, tuple[int, ...]]] = []
            offset = 0
            for name in names:
                t = tensors[name]
                if current and (offset + t.numel()) * itemsize > bucket_bytes:
                    buckets.append(current)
                    dtypes.append(dtype)
                    sizes.append(offset)
                    current, offset = [], 0
                current.append((name, offset, t.numel(), tuple(t.shape)))
                offset += t.numel()
            if current:
                buckets.append(current)
                dtypes.append(dtype)
                sizes.append(offset)
        return cls(buckets=buckets, dtypes=dtypes, sizes=sizes)

    @property
    def signature(self) -> str:
        """A hash of names, shapes and dtypes: equal on both ends or the sync refuses to start."""
        blob = repr([(b, str(d)) for b, d in zip(self.buckets, self.dtypes, strict=True)])
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def nbytes(self) -> int:
        """Bytes moved by one sync."""
        return sum(n * torch.empty((), dtype=d).element_size() for n, d in zip(self.sizes, self.dtypes, strict=True))

    def flatten_in_place(self, modules: Mapping[str, Any]) -> list[torch.Tensor]:
        """Move every tensor into persistent bucket storage and make the modules' tensors views of it.

        Afterwards a broadcast reads and writes the buckets directly: no packing before, no unpacking after.
        Optimizers keep working (they hold the same ``Parameter`` objects, whose ``.data`` now lives in a
        bucket).
        """
        originals: dict[str, torch.Tensor] = {}
        for mname in sorted(modules):
            for key, tensor in modules[mname].state_dict(keep_vars=True).items():
                originals[f"{mname}.{key}"] = tensor
        flats = []
        with torch.no_grad():
            for index, entries in enumerate(self.buckets):
                flat = self.empty(index, device=originals[entries[0][0]].device)  # nccl needs GPU buckets
                for name, offset, numel, shape in entries:
                    view = flat[offset: offset + numel].view(shape)
                    view.copy_(originals[name].detach())
                    originals[name].data = view
                flats.append(flat)
        return flats

    def pack(self, tensors: Mapping[str, torch.Tensor], index: int) -> torch.Tensor:
        """Bucket ``index`` as one contiguous tensor (a copy of the current values)."""
        return torch.cat([tensors[name].detach().reshape(-1) for name, _, _, _ in self.buckets[index]])

    def empty(self, index: int, device: Any = "cpu") -> torch.Tensor:
        """A receive buffer for bucket ``index``."""
        return torch.empty(self.sizes[index], dtype=self.dtypes[index], device=device)

    def unpack(self, flat: torch.Tensor, tensors: Mapping[str, torch.Tensor], index: int) -> None:
        """Copy bucket ``index`` into the tensors, in place."""
        with torch.no_grad():
            for name, offset, numel, shape in self.buckets[index]:
                tensors[name].copy_(flat[offset: offset + numel].view(shape))
