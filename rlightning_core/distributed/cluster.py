"""Starting or joining a Ray cluster for a run, and shutting down what we started."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from rlightning_core.config.schema import ClusterConfig, MainConfig

__all__ = ["LOOPBACK_ENV", "ClusterTarget", "RayCluster", "cluster_target", "import_ray", "import_ray_for",
           "recorded_cluster_address", "required_cpus"]

log = logging.getLogger("rlightning")

#: Ray's logger for its token-authentication set-up (Ray >= 2.5x; an unused logger name on older versions).
_RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


class _DropAuthNotice(logging.Filter):
    """Drops Ray's "Token authentication is enabled" notice, printed on every ``ray.init`` of every run.

    Auth stays as Ray sets it (on by default for a local cluster); only the notice about the default goes.
    Ray's warning that auth is *disabled* still shows.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Token authentication is enabled")


def quiet_auth_notice() -> None:
    """Install :class:`_DropAuthNotice` on Ray's auth logger once (idempotent)."""
    logger = logging.getLogger(_RAY_AUTH_LOGGER)
    if not any(isinstance(f, _DropAuthNotice) for f in logger.filters):
        logger.addFilter(_DropAuthNotice())


def import_ray() -> Any:
    """``ray``, or a clear error telling how to install it."""
    from rlightning_core.dependencies import import_module

    return import_module("ray", pip="rlightning[ray]", needed_by="Ray mode")


#: Ray's switch for multi-node clusters. Off, Ray takes this machine's loopback address as the node's address
#: (as it does on macOS and Windows), so the GCS, raylet, workers and agents of a cluster started here listen on
#: 127.0.0.1 only. Ray reads it once, when it is imported.
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def import_ray_for(cluster: ClusterConfig, environ: Any = os.environ) -> Any:
    """``ray``, imported so that a private local cluster (:func:`cluster_target`) listens on loopback only.

    Ray turns ``ray.init(_node_ip_address="127.0.0.1")`` into this machine's address and then binds its servers
    to every interface. A cluster no other machine will join needs none of that: before the first import of
    ``ray``, ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (unless the environment sets it) makes Ray keep the node on
    loopback. Joining a cluster changes nothing; neither does a ``ray`` imported earlier (see
    :meth:`RayCluster.start`, which says so).
    """
    if "ray" not in sys.modules and not cluster_target(cluster, environ).join:
        environ.setdefault(LOOPBACK_ENV, "0")
    return import_ray()


def required_cpus(config: MainConfig) -> float:
    """CPUs the run's actors reserve: env runners, learners and rollout workers."""
    c = config.cluster
    envs = sum(e.num_workers * e.num_cpus for e in config.env)
    return envs + c.num_learners * c.learner_num_cpus + c.num_inference_servers * c.inference_server_num_cpus


@attrs.define(frozen=True)
class ClusterTarget:
    """Which Ray cluster a run uses: the ``address`` given to ``ray.init`` and whether that joins one."""

    address: str
    """``local`` (start a private cluster), or the address of the cluster to join."""
    join: bool
    description: str
    """One line for the plan (``train --dry-run`` and the run's start-up log)."""


def cluster_target(cluster: ClusterConfig, environ: Mapping[str, str] = os.environ) -> ClusterTarget:
    """Where a run's Ray cluster comes from (pure: the config and the environment).

    ``cluster.address`` joins that cluster (``auto``: the one ``ray start`` started on this machine). Unset, the
    run starts a private local cluster sized for its actors (``ray.init(address="local")``), even when another
    one is running here: ``ray.init()`` would join that one, where ``cluster.num_cpus`` / ``num_gpus`` cannot
    apply. The exception is ``RAY_ADDRESS`` in the environment, which ``ray job submit`` sets for a job's driver:
    the run joins that cluster, as Ray documents.
    """
    if cluster.address == "auto":
        return ClusterTarget(address="auto", join=True, description="joins the Ray cluster running on this machine "
                                                                    "(cluster.address: auto)")
    if cluster.address is not None:
        return ClusterTarget(address=cluster.address, join=True,
                             description=f"joins the Ray cluster at {cluster.address} (cluster.address)")
    env = environ.get("RAY_ADDRESS", "")
    if env:
        return ClusterTarget(address=env, join=True,
                             description=f"joins the Ray cluster at {env} (the RAY_ADDRESS environment variable; "
                                         "cluster.address is unset)")
    return ClusterTarget(address="local", join=False,
                         description="a private local cluster started for the run (cluster.address unset; "
                                     "cluster.address: auto joins a running one)")


def recorded_cluster_address(environ: Mapping[str, str] = os.environ) -> str | None:
    """The address of the cluster ``ray start`` last started on this machine, if it recorded one.

    ``ray start`` writes it to ``ray_current_cluster`` in Ray's temp directory (``$RAY_TMPDIR/ray``, else
    ``$TMPDIR/ray`` on Linux, else ``/tmp/ray``), which is where ``ray.init()`` without an address looks. Only
    read to say that the run did not join it; a stale file (a cluster that has since died) reads the same.
    """
    root = environ.get("RAY_TMPDIR") or (environ.get("TMPDIR") if sys.platform.startswith("linux") else None)
    if not root:
        root = "/tmp" if sys.platform.startswith(("linux", "darwin")) else tempfile.gettempdir()
    try:
        address = (Path(root) / "ray" / "ray_current_cluster").read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return address or None


class RayCluster:
    """Joins ``cluster.address`` or starts a private local cluster (loopback, dashboard off unless asked).

    A locally started cluster gets ``cluster.num_cpus`` CPUs, or as many as the run's actors reserve when that
    is more than this machine has (logical CPUs; the OS shares the cores), so a laptop can run the same config
    as a cluster. Only a cluster this object started is shut down by :meth:`shutdown`. Which cluster:
    :func:`cluster_target`.
    """

    @classmethod
    def for_run(cls, config: MainConfig) -> RayCluster:
        """A cluster sized for every actor of ``config``."""
        return cls(config.cluster, required_cpus(config))

    def __init__(self, cluster: ClusterConfig, required_cpus: float = 0.0) -> None:
        self.cluster = cluster
        self.required_cpus = required_cpus
        self.started = False
        self.init_s = 0.0

    def start(self) -> RayCluster:
        """Connect (idempotent: an already initialized Ray is reused and left running)."""
        ray = import_ray_for(self.cluster)
        if ray.is_initialized():
            return self
        c = self.cluster
        t0 = time.perf_counter()
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        quiet_auth_notice()
        target = cluster_target(c)
        if target.join:
            log.info("ray: %s", target.description)
            ray.init(address=target.address, logging_level=logging.WARNING, log_to_driver=True)
        else:
            running = recorded_cluster_address()
            if running is not None:
                log.info("ray: a cluster started with `ray start` is recorded on this machine (%s); this run "
                         "starts a private one, as cluster.address is unset (cluster.address: auto joins that "
                         "one)", running)
            cpus = c.num_cpus or max(os.cpu_count() or 1, int(self.required_cpus + 0.999))
            ray.init(address="local", num_cpus=cpus, num_gpus=c.num_gpus, include_dashboard=c.dashboard,
                     _node_ip_address="127.0.0.1", logging_level=logging.WARNING, log_to_driver=True)
            self.started = True
            node_ip = ray.util.get_node_ip_address()
            if not node_ip.startswith("127."):
                log.warning("ray: the private cluster listens on %s (all interfaces), not on loopback only: "
                            "ray was imported before the run started it; set %s=0 before importing ray for "
                            "loopback only (docs/ray.md)", node_ip, LOOPBACK_ENV)
        self.init_s = time.perf_counter() - t0
        return self

    def shutdown(self) -> None:
        """Shut down the cluster if this object started it."""
        if self.started:
            import ray

            ray.shutdown()
            self.started = False
