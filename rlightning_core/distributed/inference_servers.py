"""The driver's side of the inference-server topology: start, route to, and revive the rollout actors."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from rlightning_core.distributed.ray_common import RayExecutionState
from rlightning_core.env.seeding import derive_seed
from rlightning_core.errors import RestartsUsedUpError

__all__ = ["InferenceServersMixin"]

log = logging.getLogger("rlightning")


class InferenceServersMixin(RayExecutionState):
    """Mixed into :class:`~rlightning_core.distributed.execution.RayExecution` (``topology: inference_server``)."""

    servers: list[Any]
    routes: list[tuple[int, int]]
    server_restarts: list[int]
    restarts: int
    strategy: str
    policy_cfg: Any
    selection: Any
    seeds: Any
    observation_space: Any
    action_space: Any

    weight_sync: Any

    if TYPE_CHECKING:
        def _get(self, refs: Any, timeout: float, what: str) -> Any: ...

    def _start_servers(self) -> None:
        """``cluster.num_inference_servers`` servers; env workers are routed to them (sticky, two halves each)."""
        from rlightning_core.distributed.inference import route

        cc = self.config.cluster
        self.routes = route(len(self.env_group.actors), cc.num_inference_servers)
        self.server_restarts = [0] * cc.num_inference_servers
        self.servers = [self._create_server(j) for j in range(cc.num_inference_servers)]
        self._server_has_value = self._get(self.servers[0].has_value.remote(), cc.actor_start_timeout_s,
                                           "start the inference servers")
        log.info("inference servers: %d, env workers routed %s", len(self.servers), self.routes)

    def _create_server(self, j: int) -> Any:
        from rlightning_core.distributed.env_group import remote_class
        from rlightning_core.distributed.inference import InferenceServerActor

        cc = self.config.cluster
        k = self.server_restarts[j]
        seed = derive_seed(self.config.seed, 4, 1000 + j, k) if k else derive_seed(self.config.seed, 4, 1000 + j)
        halves = [sum(1 for s, h in self.routes if s == j and h == half) for half in (0, 1)]
        ptype = self.policy_cfg.type.replace(":", "-")
        server: Any = remote_class(self.ray, InferenceServerActor, {}).options(
            num_cpus=cc.inference_server_num_cpus, num_gpus=cc.inference_server_num_gpus,
            name=f"inference-server-{ptype}-{j}-r{k}",
            max_concurrency=64,
        ).remote(self.policy_cfg, selection=self.selection, seed=seed, observation_space=self.observation_space,
                 action_space=self.action_space, half_sizes=halves, num_threads=self.policy_cfg.num_threads)
        self.seeds.record("rollout_server", group=0, rank=j, restart=k, seed=seed)
        if cc.offload:
            server.set_offload.remote(True)
        return server

    def _alive(self, index: int) -> bool:
        try:
            self.ray.get(self.env_group.actors[index].pid.remote(),
                         timeout=min(30.0, self.config.cluster.call_timeout_s))
            return True
        except Exception:
            return False

    def _revive_servers(self) -> None:
        """Recreate dead inference servers and re-sync them before any env actor asks them again."""
        cc = self.config.cluster
        dead = []
        for j, server in enumerate(self.servers):
            try:
                self.ray.get(server.weight_version.remote(), timeout=min(30.0, cc.call_timeout_s))
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.GetTimeoutError):
                dead.append(j)
        for j in dead:
            self.restarts += 1
            if self.restarts > cc.max_restarts:
                raise RestartsUsedUpError(f"inference server {j}", cc.max_restarts)
            log.warning("inference server %d failed; recreating it (restart %d of %d)", j, self.restarts,
                        cc.max_restarts)
            try:
                self.ray.kill(self.servers[j], no_restart=True)
            except Exception:
                pass
            self.server_restarts[j] += 1
            self.servers[j] = self._create_server(j)
        if dead:
            self.weight_sync.resync(dead)
