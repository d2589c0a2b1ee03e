"""Weight sync: push 1M / 10M / 100M float32 parameters from a learner to 2 rollout workers.

Strategies, measured in one run on a real local Ray cluster:
- broadcast: rlightning's bucketed torch.distributed broadcast (gloo on CPU), learner rank 0 -> 2 workers;
- object_store: one ray.put of numpy arrays, every worker gets and copies into its tensors;
- double_buffer: the same broadcast, received into staging buckets on a second actor thread (the rollout
  copy keeps acting), then swapped in by pointer; timed until every worker has swapped;
- node_shared: the learner writes one copy into the node's /dev/shm slots, both workers load it from there;
- plain (the reference): a plain torch.distributed broadcast of the same bytes as one flat tensor, between
  three Ray actors with no rlightning code, gloo over TCP;
- copy_ (the bound): a single-process tensor copy of the same bytes (once per receiver).
Targets at 100M: broadcast within 1.5x of plain and >= 2x faster than object_store; node_shared <= 3x the
copy_ bound.

``--nodes`` puts the learner and each worker on a node of its own: a simulated cluster on this machine
(``ray.cluster_utils.Cluster``, one raylet and object store per node), so object-store reads are transfers
between nodes, as on a real cluster whose rollout workers are not on the learner's node. ``node_shared`` is
skipped there (it shares memory within a node only).

    python benchmarks/weight_sync.py [--sizes 1e6 1e7 1e8] [--repeats 3] [--nodes]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import numpy as np
import ray
import torch

from rlightning_core.distributed.collective_member import CollectiveMember


class FlatModule(torch.nn.Module):
    def __init__(self, numel: int) -> None:
        super().__init__()
        # a few tensors like a real network: ~40% / 40% / 20% of the parameters
        a, b = int(numel * 0.4), int(numel * 0.4)
        self.w1 = torch.nn.Parameter(torch.zeros(a))
        self.w2 = torch.nn.Parameter(torch.zeros(b))
        self.w3 = torch.nn.Parameter(torch.zeros(numel - a - b))


class Member(CollectiveMember):
    def __init__(self, numel: int, fill: float) -> None:
        torch.set_num_threads(1)
        self.module = FlatModule(numel)
        with torch.no_grad():
            for p in self.module.parameters():
                p.fill_(fill)

    def _sync_modules(self):
        return {"net": self.module}

    def modules(self):  # the policy interface the post-sync fingerprint reads
        return self._sync_modules()

    def _weights_holder(self):
        return self

    def get_numpy(self):
        return {k: v.detach().numpy() for k, v in self.module.state_dict().items()}

    def set_numpy(self, weights):
        with torch.no_grad():
            for k, v in self.module.state_dict().items():
                v.copy_(torch.from_numpy(np.array(weights[k], copy=False)) if weights[k].flags.writeable
                        else torch.as_tensor(weights[k].copy()))
        return True

    def checksum(self) -> float:
        return float(sum(p.double().sum() for p in self.module.parameters()))


class PlainMember:
    """torch.distributed and nothing else: one flat float32 tensor, broadcast from rank 0."""

    def __init__(self, numel: int, fill: float) -> None:
        torch.set_num_threads(1)
        self.flat = torch.full((numel,), fill)

    def init(self, addr: str, port: int, rank: int, world: int) -> bool:
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world)
        return True

    def broadcast(self) -> float:
        import torch.distributed as dist

        dist.broadcast(self.flat, src=0)
        return float(self.flat[-1])

    def close(self) -> None:
        import torch.distributed as dist

        dist.destroy_process_group()


def on_node(rank: int, nodes: bool) -> dict[str, dict[str, float]]:
    """Actor options that place rank ``rank`` on node ``rank`` of a ``--nodes`` cluster (nothing otherwise)."""
    return {"resources": {f"node{rank}": 0.01}} if nodes else {}


def plain_broadcast(numel: int, repeats: int, nodes: bool) -> float:
    """Median seconds of the reference broadcast to 2 receivers."""
    import socket

    remote = ray.remote(PlainMember)
    members = [remote.options(num_cpus=1, **on_node(r, nodes)).remote(numel, 1.0 if r == 0 else 0.0) for r in range(3)]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ray.get([m.init.remote("127.0.0.1", port, r, 3) for r, m in enumerate(members)])
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        got = ray.get([m.broadcast.remote() for m in members])
        times.append(time.perf_counter() - t0)
    assert got == [1.0, 1.0, 1.0]  # the bytes arrived
    ray.get([m.close.remote() for m in members])
    for m in members:
        ray.kill(m)
    return statistics.median(times)


def bench(numel: int, repeats: int, nodes: bool) -> dict[str, float]:
    remote = ray.remote(concurrency_groups={"weights": 1})(Member)
    learner = remote.options(num_cpus=1, **on_node(0, nodes)).remote(numel, 1.0)
    workers = [remote.options(num_cpus=1, **on_node(r, nodes)).remote(numel, 0.0) for r in (1, 2)]
    members = [learner, *workers]
    addr, port = ray.get(learner.free_port.remote())
    ray.get([m.init_collective.remote(addr, port, r, 3, "gloo", 64 << 20) for r, m in enumerate(members)])
    ray.get([w.enable_double_buffer.remote(64 << 20) for w in workers])
    token = f"bench{os.getpid()}"
    if not nodes:
        ray.get([m.shm_attach.remote(token, 64 << 20) for m in members])
    out: dict[str, list[float]] = {"broadcast": [], "object_store": [], "double_buffer": [], "node_shared": [],
                                   "copy_": []}
    for rep in range(repeats):
        t0 = time.perf_counter()
        ray.get([m.broadcast_weights.remote(1) for m in members])
        out["broadcast"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ray.get([learner.broadcast_weights.remote(2)]
                + [w.stage_weights.options(concurrency_group="weights").remote(2) for w in workers])
        ray.get([w.apply_staged.remote() for w in workers])
        out["double_buffer"].append(time.perf_counter() - t0)
        if not nodes:
            t0 = time.perf_counter()
            ray.get(learner.shm_write.remote(rep))
            ray.get([w.shm_read.remote(rep) for w in workers])
            out["node_shared"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ref = learner.get_numpy.remote()
        ray.get([w.set_numpy.remote(ref) for w in workers])
        out["object_store"].append(time.perf_counter() - t0)
        src, dst = torch.ones(numel), torch.zeros(numel)
        t0 = time.perf_counter()
        dst.copy_(src)
        dst.copy_(src)  # two receivers
        out["copy_"].append(time.perf_counter() - t0)
    assert ray.get(workers[0].checksum.remote()) == float(numel)  # the weights arrived
    if not nodes:
        ray.get([m.shm_detach.remote(True) for m in members])
    for m in members:
        ray.kill(m)
    result = {k: statistics.median(v) if v else float("nan") for k, v in out.items()}
    result["plain"] = plain_broadcast(numel, repeats, nodes)
    return result


def start(nodes: bool, largest: int) -> Any:
    """A local Ray cluster of 4 CPUs, or with ``nodes`` a head and 3 nodes of 2 CPUs; returns what to shut down."""
    if not nodes:
        ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1", logging_level="ERROR",
                 log_to_driver=False)
        return None
    from ray.cluster_utils import Cluster

    store = max(256 << 20, 3 * largest * 4)  # room for the weights and the copies a transfer holds
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for rank in range(3):
        cluster.add_node(num_cpus=2, resources={f"node{rank}": 1}, object_store_memory=store)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    return cluster


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", nargs="*", type=float, default=[1e6, 1e7, 1e8])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nodes", action="store_true",
                        help="learner and each worker on a node of its own (a simulated 3-node cluster)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()}; {'3 nodes, one rank each' if args.nodes else 'one node'}")
    cluster = start(args.nodes, int(max(args.sizes)))
    try:
        print(f"{'params':>10} {'MB':>7} {'broadcast s':>12} {'object_store s':>15} {'dbl_buffer s':>13} "
              f"{'node_shared s':>14} {'plain s':>9} {'copy_ s':>9} {'bcast GB/s':>10} {'shm GB/s':>9} "
              f"{'bcast/plain':>11} {'obj/bcast':>9} {'shm/copy_':>9}")
        last = None
        for size in args.sizes:
            n = int(size)
            r = bench(n, args.repeats, args.nodes)
            mb = n * 4 / 1e6
            print(f"{n:>10} {mb:>7.0f} {r['broadcast']:>12.3f} {r['object_store']:>15.3f} "
                  f"{r['double_buffer']:>13.3f} {r['node_shared']:>14.3f} {r['plain']:>9.3f} {r['copy_']:>9.4f} "
                  f"{2 * mb / 1e3 / r['broadcast']:>10.2f} {2 * mb / 1e3 / r['node_shared']:>9.2f} "
                  f"{r['broadcast'] / r['plain']:>11.2f} {r['object_store'] / r['broadcast']:>9.2f} "
                  f"{r['node_shared'] / r['copy_']:>9.2f}")
            last = r
        if last is not None:
            plain = last["broadcast"] / last["plain"]
            print(f"target at the largest size: broadcast within 1.5x of a plain torch.distributed broadcast -> "
                  f"{plain:.2f}x {'PASS' if plain <= 1.5 else 'FAIL'}")
            ratio = last["object_store"] / last["broadcast"]
            print(f"target at the largest size: broadcast >= 2x faster than object_store -> {ratio:.2f}x "
                  f"{'PASS' if ratio >= 2 else 'FAIL'}")
            if not args.nodes:
                shm = last["node_shared"] / last["copy_"]
                print(f"target at the largest size: node_shared <= 3x the copy_ bound -> {shm:.2f}x "
                      f"{'PASS' if shm <= 3 else 'FAIL'}")
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()


if __name__ == "__main__":
    main()
