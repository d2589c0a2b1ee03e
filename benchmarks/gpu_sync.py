"""GPU weight sync: rlightning's sync paths with the learner's weights on a GPU, checked bit for bit and timed.

Run where CUDA is (``bash benchmarks/gpu_check.sh run`` does, with the ``-m gpu`` tests). 1M / 10M / 100M
float32 parameters, 2 receivers, medians of ``--repeats``; every scenario ends with a digest of every rank's
weights, which must be equal.

- ``gpu->cpu``: learner on the GPU, 2 rollout copies on CPU (the env-runner topology: runners hold no GPU).
  The group's backend is what ``collective_backend("auto", ...)`` picks for these devices (gloo).
- ``colocated``: learner and 2 rollout copies on one GPU (fractional ``num_gpus``, like ``placement:
  colocate`` with GPU inference servers); auto picks gloo again (NCCL refuses two ranks on one GPU).
- ``nccl``: with 2+ GPUs, one rank per GPU over nccl. With one GPU, two nccl ranks on it are tried once and
  NCCL's answer is printed: the evidence for auto's choice above.

Columns: bucketed ``broadcast``; ``node_shared`` (learner writes the /dev/shm slot, receivers load it);
``object_store`` (one ``ray.put`` of numpy arrays, receivers copy in); ``copy_`` bound (one process copies the
same bytes twice, on the receivers' device).

    python benchmarks/gpu_sync.py [--sizes 1e6 1e7 1e8] [--repeats 3] [--allow-cpu]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import time

import ray
import torch

from rlightning_core.distributed.collective_member import CollectiveMember
from rlightning_core.distributed.ray_common import collective_backend


class FlatModule(torch.nn.Module):
    def __init__(self, numel: int) -> None:
        super().__init__()
        a, b = int(numel * 0.4), int(numel * 0.4)  # a few tensors like a real network
        self.w1 = torch.nn.Parameter(torch.zeros(a))
        self.w2 = torch.nn.Parameter(torch.zeros(b))
        self.w3 = torch.nn.Parameter(torch.zeros(numel - a - b))


class Member(CollectiveMember):
    """One rank: its weights on ``device``; the sender's are random, the receivers' zero."""

    def __init__(self, numel: int, device: str, sender: bool) -> None:
        torch.set_num_threads(2)
        self.device = torch.device(device)
        self.module = FlatModule(numel).to(self.device)
        if sender:
            gen = torch.Generator().manual_seed(0)
            with torch.no_grad():
                for p in self.module.parameters():
                    p.copy_(torch.randn(p.shape, generator=gen))

    def _sync_modules(self):
        return {"net": self.module}

    def get_numpy(self):
        return {k: v.detach().cpu().numpy() for k, v in self.module.state_dict().items()}

    def set_numpy(self, weights) -> bool:
        with torch.no_grad():
            for k, v in self.module.state_dict().items():
                v.copy_(torch.as_tensor(weights[k]))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return True

    def timed_broadcast(self, version: int) -> float:
        out = self.broadcast_weights(version)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return out["seconds"]

    def digest(self) -> str:
        h = hashlib.sha256()
        for _, v in sorted(self.module.state_dict().items()):
            h.update(v.detach().cpu().numpy().tobytes())
        return h.hexdigest()[:16]


def _remote(device: str, gpu_share: float):
    opts: dict = {"num_cpus": 1}
    if device.startswith("cuda"):
        opts["num_gpus"] = gpu_share
    return ray.remote(Member).options(**opts)


def scenario(name: str, numel: int, devices: list[str], repeats: int, backend: str | None = None,
             gpu_share: float = 0.3, timeout_s: float = 60.0) -> dict[str, float]:
    """Time the sync paths from rank 0 (``devices[0]``) to the others; returns the medians."""
    members = [_remote(d, gpu_share).remote(numel, d, r == 0) for r, d in enumerate(devices)]
    try:
        synced = ray.get([m.sync_device.remote() for m in members])
        chosen, why = collective_backend("auto", synced)
        backend = backend or chosen
        addr, port = ray.get(members[0].free_port.remote())
        ray.get([m.init_collective.remote(addr, port, r, len(members), backend, 64 << 20, timeout_s)
                 for r, m in enumerate(members)], timeout=timeout_s + 30)
        out: dict[str, list[float]] = {"broadcast": [], "node_shared": [], "object_store": [], "copy_": []}
        ray.get([m.timed_broadcast.remote(0) for m in members], timeout=timeout_s + 30)  # warm-up (nccl: comm)
        ray.get([m.shm_attach.remote(f"gpubench{os.getpid()}", 64 << 20) for m in members])
        for rep in range(repeats):
            t0 = time.perf_counter()
            ray.get([m.timed_broadcast.remote(rep + 1) for m in members])
            out["broadcast"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            ray.get(members[0].shm_write.remote(rep))
            ray.get([m.shm_read.remote(rep) for m in members[1:]])
            out["node_shared"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            ref = members[0].get_numpy.remote()
            ray.get([m.set_numpy.remote(ref) for m in members[1:]])
            out["object_store"].append(time.perf_counter() - t0)
            out["copy_"].append(_copy_bound(numel, devices[1]))
        digests = ray.get([m.digest.remote() for m in members])
        if len(set(digests)) != 1:
            raise RuntimeError(f"the receivers' weights differ from the sender's: {digests}")
        ray.get([m.shm_detach.remote(True) for m in members])
        result = {k: statistics.median(v) for k, v in out.items()}
        result["backend"] = backend  # type: ignore[assignment]
        result["why"] = why  # type: ignore[assignment]
        return result
    finally:
        for m in members:
            ray.kill(m)


def _first_line(e: BaseException) -> str:
    lines = [ln for ln in str(e).splitlines() if "Error" in ln or "NCCL" in ln or "nccl" in ln]
    return (lines[-1] if lines else str(e).splitlines()[0]).strip()[:300]


def _copy_bound(numel: int, device: str) -> float:
    src = torch.ones(numel, device=device)
    dst = torch.zeros(numel, device=device)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    dst.copy_(src)
    dst.copy_(src)  # two receivers
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", nargs="*", type=float, default=[1e6, 1e7, 1e8])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--allow-cpu", action="store_true", help="without CUDA, run the same paths on CPU")
    args = parser.parse_args()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not gpus and not args.allow_cpu:
        print("gpu_sync: no CUDA device here, skipped (--allow-cpu runs the same paths on CPU, a plumbing check)")
        return
    gpu = "cuda" if gpus else "cpu"
    nccl = torch.cuda.nccl.version() if gpus else ""
    nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    name = f": {torch.cuda.get_device_name(0)}, nccl {nccl}" if gpus else ""
    print(f"torch {torch.__version__}, {gpus} GPU(s){name}")
    ray.init(num_cpus=max(4, min(8, os.cpu_count() or 4)), num_gpus=gpus, include_dashboard=False,
             _node_ip_address="127.0.0.1", logging_level="ERROR", log_to_driver=False)
    try:
        print(f"{'scenario':>10} {'params':>10} {'MB':>6} {'backend':>7} {'broadcast s':>11} {'GB/s':>6} "
              f"{'node_shared s':>13} {'object_store s':>14} {'copy_ s':>8} {'obj/bcast':>9} {'shm/copy_':>9}")
        plans = [("gpu->cpu", [gpu, "cpu", "cpu"], None), ("colocated", [gpu, gpu, gpu], None)]
        if gpus >= 2:
            plans.append(("nccl", ["cuda:0", "cuda:1"], "nccl"))
        failed = []
        for name, devices, backend in plans:
            r = None
            for size in args.sizes:
                n = int(size)
                try:
                    r = scenario(name, n, devices, args.repeats, backend)
                except Exception as e:  # one broken scenario must not cost the others' numbers
                    failed.append(f"{name} {n}: {type(e).__name__}: {_first_line(e)}")
                    print(f"{name:>10} {n:>10} FAILED {failed[-1]}", flush=True)
                    continue
                mb = n * 4 / 1e6
                receivers = len(devices) - 1
                print(f"{name:>10} {n:>10} {mb:>6.0f} {r['backend']:>7} {r['broadcast']:>11.4f} "
                      f"{receivers * mb / 1e3 / r['broadcast']:>6.2f} {r['node_shared']:>13.4f} "
                      f"{r['object_store']:>14.4f} {r['copy_']:>8.4f} {r['object_store'] / r['broadcast']:>9.2f} "
                      f"{r['node_shared'] / r['copy_']:>9.1f}", flush=True)
            if r is not None:
                print(f"{'':>10} backend chosen by auto: {r['backend']} ({r['why']})")
        if gpus == 1:
            try:
                r = scenario("nccl", int(args.sizes[0]), ["cuda", "cuda"], 1, "nccl", gpu_share=0.5, timeout_s=30)
            except Exception as e:  # what NCCL says is the result
                print(f"two nccl ranks on one GPU: refused: {type(e).__name__}: {_first_line(e)}")
            else:
                print(f"two nccl ranks on one GPU: accepted; broadcast {r['broadcast']:.4f} s, "
                      f"{args.sizes[0]:.0e} params")
    finally:
        ray.shutdown()
    print(f"every sync bit for bit: {'FAIL (' + '; '.join(failed) + ')' if failed else 'PASS'}")


if __name__ == "__main__":
    main()
