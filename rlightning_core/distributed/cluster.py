"""Starting or joining a Ray cluster for a run, and shutting down what we started."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from rlightning_core.config.schema import ClusterConfig, MainConfig

__all__ = ["RayCluster", "import_ray", "required_cpus"]

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


def required_cpus(config: MainConfig) -> float:
    """CPUs the run's actors reserve: env runners, learners and rollout workers."""
    c = config.cluster
    envs = sum(e.num_workers * e.num_cpus for e in config.env)
    return envs + c.train_workers * c.learner_num_cpus + c.eval_workers * c.rollout_num_cpus


class RayCluster:
    """Joins ``cluster.address`` or starts a local cluster (loopback, dashboard off unless asked).

    A locally started cluster gets ``cluster.num_cpus`` CPUs, or as many as the run's actors reserve when that
    is more than this machine has (logical CPUs; the OS shares the cores), so a laptop can run the same config
    as a cluster. Only a cluster this object started is shut down by :meth:`shutdown`.
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
        self.helper: Any = None
        """A :class:`~rlightning_core.distributed.early_start.LearnerHelper` started with Ray, for the run."""

    def start(self) -> RayCluster:
        """Connect (idempotent: an already initialized Ray is reused and left running)."""
        ray = import_ray()
        if ray.is_initialized():
            return self
        c = self.cluster
        t0 = time.perf_counter()
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        quiet_auth_notice()
        if c.train_workers == 0:  # the learner will be built here: import torch while ray.init waits on its daemons
            from rlightning_core.policy.lazy_dynamo import prefetch_module

            # at a low priority: on 2 cores an import at full priority slowed ray.init's daemons by ~0.5 s
            prefetch_module("torch", nice=10)
        else:  # a helper process imports torch meanwhile, to build the learner's initial weights (early_rollout)
            from rlightning_core.distributed.early_start import start_helper

            self.helper = start_helper(c)
        try:
            if c.address is not None:
                ray.init(address=c.address, logging_level=logging.WARNING, log_to_driver=True)
            else:
                cpus = c.num_cpus or max(os.cpu_count() or 1, int(self.required_cpus + 0.999))
                ray.init(num_cpus=cpus, num_gpus=c.num_gpus, include_dashboard=c.dashboard,
                         _node_ip_address="127.0.0.1", logging_level=logging.WARNING, log_to_driver=True)
                self.started = True
        except BaseException:
            if self.helper is not None:  # no run for it
                self.helper.close()
                self.helper = None
            raise
        self.init_s = time.perf_counter() - t0
        return self

    def shutdown(self) -> None:
        """Shut down the cluster if this object started it."""
        if self.helper is not None:
            self.helper.close()
            self.helper = None
        if self.started:
            import ray

            ray.shutdown()
            self.started = False
