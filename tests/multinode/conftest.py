"""A real multi-node Ray cluster on this machine, for the module that uses it.

``ray.cluster_utils.Cluster`` starts a head and worker nodes, each its own raylet (with its own object store and
workers), all on this machine. The head has no CPUs, like a production head node, so every actor of a run is
placed on a worker node, and any worker node can be removed without touching the driver's node. CPU counts are
logical: three 2-CPU nodes on a 2-core machine only say how many actors each node may take.

Ray rewrites a loopback node address to the machine's address (``resolve_ip_for_localhost``), so the nodes
listen on this machine's address, as in Ray's own multi-node tests. The runs join through ``cluster.address``,
as a user's run joins a cluster started with ``ray start``; the test process never connects before a run.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE_RAY = ROOT / "examples" / "cartpole_ppo_ray.yaml"
WORKER_NODES = 3
CPUS_PER_NODE = 2
#: Node failure is noticed within a few seconds (Ray's defaults take ~30 s); an event, not a timing assumption.
_HEALTH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 1000, "health_check_failure_threshold": 3}


def _have(kind: str, name: str) -> bool:
    from rlightning_core.plugins import get_plugins

    return name in get_plugins().registry.names(kind)


class MultiNode:
    """The cluster (``cluster``), its worker nodes and helpers to add and remove them."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    @property
    def address(self) -> str:
        """The GCS address a run joins (``cluster.address``)."""
        return self.cluster.address

    @property
    def workers(self) -> list[Any]:
        """The worker nodes now in the cluster."""
        return list(self.cluster.worker_nodes)

    def add_worker(self) -> Any:
        """One more worker node; waits until the cluster sees it."""
        node = self.cluster.add_node(num_cpus=CPUS_PER_NODE, include_dashboard=False)
        self.cluster.wait_for_nodes()
        return node

    def remove(self, node: Any) -> None:
        """Kill ``node``'s raylet and object store, as a node that dies, and wait until Ray declares it dead.

        Its worker processes exit only when they notice their raylet is gone, and until Ray declares the node
        dead they may still answer calls; waiting for that event is what makes the loss visible to a run.
        Called from a run's hook, so the driver is connected.
        """
        import time

        import ray

        self.cluster.remove_node(node, allow_graceful=False)
        deadline = time.monotonic() + 120  # a guard against a hang, not a timing assumption
        while any(n["NodeID"] == node.node_id and n["Alive"] for n in ray.nodes()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"Ray did not declare node {node.node_id} dead within 120 s")
            time.sleep(0.1)

    def node_with_id(self, node_id: str) -> Any:
        """The worker node whose Ray node id is ``node_id``."""
        for node in self.cluster.worker_nodes:
            if node.node_id == node_id:
                return node
        raise LookupError(f"no worker node with id {node_id}")


@pytest.fixture(scope="module")
def multinode() -> Iterator[MultiNode]:
    """A head (0 CPUs) and three 2-CPU worker nodes; the driver disconnects and every node stops at the end."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    if not (_have("env", "gymnasium") and _have("policy", "ppo")):
        pytest.skip("needs the rlightning-gymnasium and rlightning-ppo plugins installed")
    if ray.is_initialized():  # another module's session cluster: a process joins one cluster at a time
        ray.shutdown()
    # a temp root of its own: Cluster records its address in $RAY_TMPDIR/ray/ray_current_cluster, which a
    # `ray.init()` of any other process on this machine would otherwise join (short: socket paths live under it)
    root = tempfile.mkdtemp(prefix="rlmn-", dir="/tmp")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_TMPDIR", root)
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "include_dashboard": False, "_system_config": _HEALTH})
        nodes = MultiNode(cluster)
        try:
            for _ in range(WORKER_NODES):
                nodes.add_worker()
            yield nodes
        finally:
            if ray.is_initialized():
                ray.shutdown()
            cluster.shutdown()
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def joined(multinode: MultiNode) -> Iterator[MultiNode]:
    """The cluster, with the driver disconnected after the test (each run joins it afresh)."""
    import ray

    yield multinode
    if ray.is_initialized():
        ray.shutdown()


def multinode_config(address: str, *overrides: str) -> Any:
    """examples/cartpole_ppo_ray.yaml joining ``address``."""
    from rlightning_core import load_config

    return load_config(CARTPOLE_RAY, [f"cluster.address={address}", "logging.progress=false", "checkpoint.every=0",
                                      *overrides])


def build_run(config: Any) -> Any:
    """The DESIGN §5 builder sequence, returning the engine."""
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

    env_group = build_env_group(config.env, seed=config.seed)
    policy_group = build_policy_group(config.policy.type, config.policy, config.cluster)
    buffer = build_data_buffer(config.buffer.type, config.buffer)
    return build_engine(config, env_group, policy_group, buffer)


@pytest.fixture
def config_for() -> Any:
    """``config_for(address, *overrides)``: :func:`multinode_config`."""
    return multinode_config


@pytest.fixture
def build() -> Any:
    """``build(config)``: :func:`build_run`."""
    return build_run
