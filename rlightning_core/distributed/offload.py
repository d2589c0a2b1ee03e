"""``cluster.offload``: colocated learner and rollout copies move their idle state off the GPU.

A learner is idle while the env runners collect; a GPU rollout copy is idle while the learner learns. When they
share a GPU (``placement: colocate``), moving the idle side's parameters and optimizer state to host memory
leaves the GPU to the busy side. On a CPU-only device there is nothing to free: the calls are no-ops (logged
once), so the same config runs on a laptop.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["move_policy", "offload_wanted"]

log = logging.getLogger("rlightning")
_logged = False


def offload_wanted(device: Any) -> bool:
    """Whether ``device`` is a GPU whose memory offloading frees (logs once when it is not)."""
    global _logged
    if str(device).startswith("cuda"):
        return True
    if not _logged:
        log.info("cluster.offload: the policy runs on %s, nothing to move off a GPU (no-op)", device)
        _logged = True
    return False


def move_policy(policy: Any, device: str) -> None:
    """Move a policy's modules and its optimizers' state tensors to ``device``.

    Parameters keep their identity (``Module.to`` swaps ``.data``), so the optimizers still hold them.
    """
    import torch

    for module in policy.modules().values():
        module.to(device)
    for opt in policy.optimizers().values():
        if opt is None:
            continue
        for state in opt.state.values():
            for key, value in list(state.items()):
                if isinstance(value, torch.Tensor) and (key != "step" or opt.defaults.get("fused")):
                    state[key] = value.to(device, non_blocking=True)
    if str(device).startswith("cuda") or torch.cuda.is_available():
        torch.cuda.empty_cache()
