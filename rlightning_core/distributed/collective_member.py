"""A rank of the weight-sync group: the base of every actor class that holds weights.

Learner rank 0 and the rollout copies: bucketed broadcast, double buffering, node-shared weight slots, offload.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["CollectiveMember", "load_plugins"]


def load_plugins(selection: Sequence[str]) -> Any:
    """Load exactly the driver's plugin set (``selection``) in this actor process, before resolving any name."""
    from rlightning_core.plugins import load_plugins, reset_plugins

    plugins = load_plugins(allow=list(selection), deny=[], strict=False)
    reset_plugins(plugins)
    return plugins


class CollectiveMember:
    """A rank in the torch.distributed group learner-rank-0 + rollout workers, for bucketed broadcast."""

    _group_ready = False
    _layout: Any = None
    _tensors: Any = None
    _shm: Any = None
    _loaded: tuple[int, Any] | None = None
    """``(version, fingerprint)`` of the weights a rollout copy last loaded."""
    _loaded_told = True

    def _sync_modules(self) -> dict[str, Any]:
        raise NotImplementedError

    def _weights_holder(self) -> Any:
        """The policy whose weights a sync replaces here (``None``: none)."""
        return None

    # -- the check after a sync: the loaded weights' fingerprint, reported with their version -----------------
    def _note_loaded(self, version: int) -> None:
        """A rollout copy loaded the weights of ``version``: keep their fingerprint to report it."""
        from rlightning_core.weights.fingerprint import policy_fingerprint

        self._loaded = (int(version), policy_fingerprint(self._weights_holder()))
        self._loaded_told = False

    def _report_for(self, version: int) -> Any:
        """The loaded weights' fingerprint if they are ``version``'s and not reported yet (then it is reported)."""
        loaded = self._loaded
        if loaded is None or self._loaded_told or loaded[0] != int(version):
            return None
        self._loaded_told = True
        return loaded[1]

    def weight_report(self) -> tuple[int, Any] | None:
        """``(version, fingerprint)`` of the weights this rollout copy last loaded (``None``: none yet)."""
        return self._loaded

    def weight_fingerprint(self) -> Any:
        """The fingerprint of this member's current weights (the learner's, once per sync)."""
        from rlightning_core.weights.fingerprint import policy_fingerprint

        return policy_fingerprint(self._weights_holder())

    def sync_device(self) -> str:
        """Where this rank's synced weights live: ``cpu``, or ``cuda:<uuid>`` (ranks sharing a GPU share it)."""
        from rlightning_core.weights.buckets import named_tensors

        tensors = named_tensors(self._sync_modules())
        device = next(iter(tensors.values())).device if tensors else None
        if device is None or device.type != "cuda":
            return "cpu"
        import torch

        return f"cuda:{torch.cuda.get_device_properties(device).uuid}"

    def free_port(self) -> tuple[str, int]:
        """An address and free TCP port on this node for the group's rendezvous (called on rank 0)."""
        import ray

        addr = ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((addr, 0))
            return addr, int(s.getsockname()[1])

    def init_collective(self, addr: str, port: int, rank: int, world_size: int, backend: str,
                        bucket_bytes: int, timeout_s: float = 120.0) -> str:
        """Join the group (all ranks call this concurrently); returns this rank's layout signature."""
        import datetime

        import torch.distributed as dist

        from rlightning_core.weights.buckets import BucketLayout, named_tensors

        if dist.is_initialized():
            dist.destroy_process_group()
        dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
        self._tensors = named_tensors(self._sync_modules())
        self._layout = BucketLayout.build(self._tensors, bucket_bytes)
        self._flat = self._layout.flatten_in_place(self._sync_modules())  # broadcast without copies
        self._group_ready = True
        return str(self._layout.signature)

    def broadcast_weights(self, version: int) -> dict[str, Any]:
        """Rank 0 sends / others receive every bucket; returns timing and byte counts (rank 0: the fingerprint)."""
        import torch.distributed as dist

        if not self._group_ready:
            raise RuntimeError("init_collective() first")
        self._ensure_on_device()
        t0 = time.perf_counter()
        for flat in self._flat:  # the modules' tensors are views of these buckets
            dist.broadcast(flat, src=0)
        info: dict[str, Any] = {"seconds": time.perf_counter() - t0, "bytes": float(self._layout.nbytes),
                                "buckets": float(len(self._layout.buckets))}
        if dist.get_rank() != 0:
            self._after_weights(version)
        else:  # the sender: the fingerprint every receiver's must equal
            info["fingerprint"] = self.weight_fingerprint()
        return info

    def _after_weights(self, version: int) -> None:
        """Hook for receivers (record the version)."""

    # -- cluster.offload for rollout copies: off the GPU while the learner learns, back before acting -------
    _offload_rollout = False
    _rollout_offloaded = False

    def _rollout_policy(self) -> Any:
        """The rollout copy that :meth:`offload_idle` moves (``None``: nothing to move)."""
        return None

    def set_offload(self, enabled: bool) -> None:
        """``cluster.offload``: let :meth:`offload_idle` move this rollout copy off its GPU."""
        self._offload_rollout = bool(enabled)

    def offload_idle(self) -> bool:
        """Move the idle rollout copy to host memory (the learner is learning); a logged no-op on CPU."""
        from rlightning_core.distributed.offload import move_policy, offload_wanted

        policy = self._rollout_policy()
        if (not self._offload_rollout or policy is None or self._rollout_offloaded
                or getattr(self, "_staging", None) is not None or not offload_wanted(policy.device)):
            return False  # double buffering keeps its GPU buckets: a transfer may be landing in them
        self._flat = []
        move_policy(policy, "cpu")
        self._rollout_offloaded = True
        return True

    def _ensure_on_device(self) -> None:
        """Bring an offloaded rollout copy back (and re-point the weight buckets) before it is used."""
        if not self._rollout_offloaded:
            return
        from rlightning_core.distributed.offload import move_policy

        policy = self._rollout_policy()
        move_policy(policy, policy.device)
        if self._layout is not None:
            self._flat = self._layout.flatten_in_place(self._sync_modules())
        self._rollout_offloaded = False

    def _ensure_layout(self, bucket_bytes: int) -> None:
        """Bucket layout and in-place flattening (once; the collective group may already have done it)."""
        from rlightning_core.weights.buckets import BucketLayout, named_tensors

        if self._layout is None:
            self._tensors = named_tensors(self._sync_modules())
            self._layout = BucketLayout.build(self._tensors, bucket_bytes)
            self._flat = self._layout.flatten_in_place(self._sync_modules())

    # -- double buffering: receive into staging buckets while acting, swap between two steps ----------------
    def enable_double_buffer(self, bucket_bytes: int) -> None:
        """Allocate the staging buckets (after :meth:`init_collective`)."""
        import threading

        self._ensure_layout(bucket_bytes)
        self._staging = [self._layout.empty(i, device=f.device) for i, f in enumerate(self._flat)]
        self._swap_lock = threading.Lock()
        self._pending_version: int | None = None
        self.swaps = 0

    def stage_weights(self, version: int) -> dict[str, float]:
        """Receive rank 0's broadcast into the staging buckets; the live weights are untouched.

        Runs in the actor's ``weights`` concurrency group, so it proceeds while a collect is acting. Weights
        staged and never swapped in are overwritten (the swap only ever sees a completely received set).
        """
        import torch.distributed as dist

        with self._swap_lock:
            self._pending_version = None
        t0 = time.perf_counter()
        for buf in self._staging:
            dist.broadcast(buf, src=0)
        with self._swap_lock:
            self._pending_version = int(version)
        return {"seconds": time.perf_counter() - t0, "bytes": float(self._layout.nbytes),
                "buckets": float(len(self._layout.buckets))}

    def apply_staged(self) -> int:
        """Swap staged weights in if a complete set is waiting (called between two steps); returns the version.

        The swap exchanges the live and staging buckets and re-points every parameter at its new bucket:
        a pointer swap, no copy, so a step never waits for a transfer.
        """
        if getattr(self, "_pending_version", None) is None:
            return -1
        with self._swap_lock:
            version, self._pending_version = self._pending_version, None
            if version is None:
                return -1
            self._flat, self._staging = self._staging, self._flat
            originals: dict[str, Any] = {}
            for mname in sorted(modules := self._sync_modules()):
                for key, tensor in modules[mname].state_dict(keep_vars=True).items():
                    originals[f"{mname}.{key}"] = tensor
            for flat, entries in zip(self._flat, self._layout.buckets, strict=True):
                for name, offset, numel, shape in entries:
                    originals[name].data = flat[offset: offset + numel].view(shape)
            self.swaps += 1
        self._after_weights(version)
        return version

    # -- node-local shared buffer: one copy per node in shared memory, read by every worker on the node ------
    def node_id(self) -> str:
        """Ray node id of this actor (workers on one node share one weight copy)."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def shm_attach(self, token: str, bucket_bytes: int) -> str:
        """Map this node's two shared weight slots (created by whoever comes first); returns the path."""
        from rlightning_core.weights.shared import SharedWeightSlots

        self._ensure_layout(bucket_bytes)
        self._shm = SharedWeightSlots(token, self._layout)
        return self._shm.path

    def shm_write(self, version: int) -> float:
        """Writer on the learner's node: copy the live weights into slot ``version % 2``; returns seconds."""
        t0 = time.perf_counter()
        self._shm.write(self._flat, version)
        return time.perf_counter() - t0

    def shm_write_from(self, weights: dict[str, np.ndarray], version: int) -> float:
        """Writer on another node: copy weights fetched once per node (object store) into the slot."""
        t0 = time.perf_counter()
        self._shm.write_named(weights, version)
        return time.perf_counter() - t0

    def shm_read(self, version: int) -> float:
        """Load slot ``version % 2`` into the live weights; returns seconds (the rollout pause)."""
        self._ensure_on_device()
        t0 = time.perf_counter()
        self._shm.read(self._flat, version)
        self._after_weights(version)
        return time.perf_counter() - t0

    def shm_detach(self, unlink: bool = False) -> None:
        """Unmap the slots (``unlink``: also remove the files; the node's writer does it at the end)."""
        shm = getattr(self, "_shm", None)
        if shm is not None:
            shm.close(unlink=unlink)
            self._shm = None

    def leave_collective(self) -> None:
        """Destroy this rank's process group (before the group is re-formed)."""
        import sys

        if "torch.distributed" not in sys.modules:  # never joined one (a torch-free runner stays torch-free)
            self._group_ready = False
            return
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
        self._group_ready = False
