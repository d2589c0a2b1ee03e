"""Trees of checkpoint state: numpy arrays to tensors and back, and the check that a tree can be saved.

``torch.load(weights_only=True)`` accepts only tensors, ``dict``, ``list``, ``tuple``, ``str``, ``bytes``,
``int``, ``float``, ``bool``, ``None``, ``torch.dtype``, ``torch.device`` and ``torch.Size``; numpy arrays are
converted with :func:`to_tensor_tree` before saving and back with :func:`to_numpy_tree` after loading (dtypes
round-trip exactly), and :func:`check_tree` names the first value that could not be loaded back.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["check_tree", "to_numpy_tree", "to_tensor_tree"]


def to_tensor_tree(obj: Any) -> Any:
    """Convert numpy arrays and scalars in a tree of dicts/lists/tuples to CPU tensors of the same dtype.

    The result can be saved in a checkpoint. Arrays are copied (the tensor does not share memory with the
    array); numpy scalars become 0-d tensors (and come back from :func:`to_numpy_tree` as 0-d arrays).

    Raises:
        TypeError: an array whose dtype torch cannot represent (object, strings, datetimes).
    """
    import torch

    if isinstance(obj, np.ndarray | np.generic):
        arr = np.asarray(obj)
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        try:
            return torch.from_numpy(np.array(arr, order="C", copy=True))
        except TypeError as exc:
            raise TypeError(f"numpy dtype {arr.dtype} has no torch equivalent and cannot be checkpointed; "
                            "convert it first") from exc
    if isinstance(obj, Mapping):
        return {k: to_tensor_tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_tensor_tree(v) for v in obj]
    if type(obj) is tuple:
        return tuple(to_tensor_tree(v) for v in obj)
    return obj


def to_numpy_tree(obj: Any) -> Any:
    """Convert tensors in a tree of dicts/lists/tuples to numpy arrays of the same dtype.

    The inverse of :func:`to_tensor_tree`; arrays are copies, detached from the tensors.

    Raises:
        TypeError: a tensor whose dtype numpy cannot represent exactly (e.g. ``bfloat16``): it is not
            reinterpreted silently.
    """
    import torch

    if isinstance(obj, torch.Tensor):
        try:
            return obj.detach().cpu().numpy().copy()
        except TypeError as exc:
            raise TypeError(f"tensor dtype {obj.dtype} has no numpy equivalent; keep it a tensor or "
                            "convert it explicitly") from exc
    if isinstance(obj, Mapping):
        return {k: to_numpy_tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_numpy_tree(v) for v in obj]
    if type(obj) is tuple:
        return tuple(to_numpy_tree(v) for v in obj)
    return obj


_SCALARS = (str, bytes, int, float, bool, complex, type(None))


def check_tree(obj: Any, where: str) -> None:
    """Raise ``TypeError`` naming the first value in ``obj`` that ``weights_only`` loading would refuse."""
    import torch

    kind = type(obj)
    if kind in _SCALARS or isinstance(obj, torch.Tensor | torch.dtype | torch.device | torch.Size):
        return
    if kind in (dict, OrderedDict):
        for key, value in obj.items():
            if type(key) not in _SCALARS:
                raise TypeError(f"{where}: key {key!r} of type {type(key).__name__} cannot be checkpointed; "
                                "use str or int keys")
            check_tree(value, f"{where}[{key!r}]")
        return
    if kind in (list, tuple):
        for i, value in enumerate(obj):
            check_tree(value, f"{where}[{i}]")
        return
    hint = (" (convert numpy values with rlightning_core.checkpoint.manager.to_tensor_tree)"
            if kind.__module__.split(".")[0] == "numpy" else "")
    raise TypeError(
        f"{where}: {kind.__module__}.{kind.__qualname__} cannot be stored in a checkpoint, which holds only "
        f"tensors, dicts, lists, tuples, str, bytes, int, float, bool and None{hint}"
    )
