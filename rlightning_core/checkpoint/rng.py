"""Capture and restore the process's global random number generators, in a checkpoint-safe form.

Covered: Python's :mod:`random`, numpy's global legacy ``RandomState`` (``np.random.*`` functions), torch's
CPU generator and, when CUDA is available, every CUDA device's generator. Generators owned by objects
(``np.random.Generator`` instances, gymnasium envs' ``np_random``) are not global: their owners checkpoint
them.

The captured dict holds only ints, floats, lists and tensors, so a checkpoint holding it loads with
weights_only=True (``torch.load(path, weights_only=True)``)::

    {"python": {"version": 3, "internal": [625 ints], "gauss_next": float | None},
     "numpy": {"bit_generator": "MT19937", "key": uint32 tensor[624], "pos": int, "has_gauss": int,
               "cached_gaussian": float},
     "torch": uint8 tensor,
     "cuda": [uint8 tensor per device]}   # [] without CUDA
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["capture_rng_state", "restore_rng_state"]


def capture_rng_state() -> dict[str, Any]:
    """The state of every global generator (Python, numpy legacy, torch CPU, CUDA) as plain data + tensors."""
    import torch

    version, internal, gauss_next = random.getstate()
    name, key, pos, has_gauss, cached = np.random.get_state(legacy=True)
    return {
        "python": {"version": int(version), "internal": [int(x) for x in internal], "gauss_next": gauss_next},
        "numpy": {
            "bit_generator": str(name),
            "key": torch.from_numpy(np.array(key, dtype=np.uint32, copy=True)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
        "cuda": list(torch.cuda.get_rng_state_all()) if torch.cuda.is_available() else [],
    }


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Put every global generator back to a state from :func:`capture_rng_state`.

    CUDA states are restored for the devices present in both the checkpoint and this process; a different
    device count (or no CUDA here) is warned about, since GPU sampling then cannot repeat exactly.

    Raises:
        ValueError: ``state`` is not a captured RNG state (the message names the missing or malformed part).
    """
    import torch

    try:
        py, npy, cpu = state["python"], state["numpy"], state["torch"]
        python_state = (int(py["version"]), tuple(int(x) for x in py["internal"]), py["gauss_next"])
        numpy_state = (
            str(npy["bit_generator"]),
            np.asarray(npy["key"].numpy() if isinstance(npy["key"], torch.Tensor) else npy["key"],
                       dtype=np.uint32),
            int(npy["pos"]),
            int(npy["has_gauss"]),
            float(npy["cached_gaussian"]),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(
            f"not a captured RNG state (from capture_rng_state): missing or malformed {exc}"
        ) from exc
    if not isinstance(cpu, torch.Tensor) or cpu.dtype != torch.uint8:
        raise ValueError(f"RNG state 'torch' must be a uint8 tensor, got {type(cpu).__name__}")

    random.setstate(python_state)
    np.random.set_state(numpy_state)
    torch.set_rng_state(cpu.cpu())

    cuda_states = list(state.get("cuda") or [])
    if not cuda_states:
        return
    if not torch.cuda.is_available():
        warnings.warn(f"the RNG state holds {len(cuda_states)} CUDA generator(s) but CUDA is not available "
                      "here; they are not restored", RuntimeWarning, stacklevel=2)
        return
    count = torch.cuda.device_count()
    if count != len(cuda_states):
        warnings.warn(f"the RNG state holds {len(cuda_states)} CUDA generator(s), this process sees {count} "
                      "device(s); restoring the first ones only", RuntimeWarning, stacklevel=2)
    for device, cuda_state in enumerate(cuda_states[:count]):
        torch.cuda.set_rng_state(cuda_state.cpu(), device)
