"""The inference-server topology on the driver's side: start the servers, route env runners to them, revive them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from rlightning_core.distributed.ray_common import get
from rlightning_core.env.seeding import derive_seed

__all__ = ["InferenceServers", "refuse_recurrent_policy"]

log = logging.getLogger("rlightning")


class InferenceServers:
    """``cluster.num_inference_servers`` servers; env runners are routed to them (sticky, two halves each).

    Args:
        ray: the ``ray`` module.
        config: the run's config.
        policy_cfg: the policy section of the config.
        selection: the plugin selection the servers load.
        seeds: the run's seed ledger (each server's seed is recorded).
        spaces: the envs' observation and action spaces.
        num_runners: env runners to route.
        count_restart: called once per recreated server, with its name (the run's restart budget).
    """

    def __init__(self, ray: Any, config: Any, policy_cfg: Any, selection: Any, seeds: Any,
                 spaces: tuple[Any, Any], num_runners: int, count_restart: Callable[[str], None]) -> None:
        from rlightning_core.distributed.inference import route

        self.ray, self.config, self.policy_cfg, self.selection, self.seeds = ray, config, policy_cfg, selection, seeds
        self.spaces, self.count_restart = spaces, count_restart
        n = config.cluster.num_inference_servers
        self.routes = route(num_runners, n)
        self.restarts = [0] * n
        self.servers = [self._create(j) for j in range(n)]
        self.attached = [0] * num_runners  # per runner: the restarts of its server when it attached
        self.has_value = get(ray, self.servers[0].has_value.remote(), config.cluster.actor_start_timeout_s,
                             "start the inference servers")
        log.info("inference servers: %d, env workers routed %s", n, self.routes)

    def _create(self, j: int) -> Any:
        from rlightning_core.distributed.env_group import remote_class
        from rlightning_core.distributed.inference import InferenceServerActor

        cc = self.config.cluster
        k = self.restarts[j]
        seed = derive_seed(self.config.seed, 4, 1000 + j, k) if k else derive_seed(self.config.seed, 4, 1000 + j)
        halves = [sum(1 for s, h in self.routes if s == j and h == half) for half in (0, 1)]
        ptype = self.policy_cfg.type.replace(":", "-")
        server: Any = remote_class(self.ray, InferenceServerActor, {}).options(
            num_cpus=cc.inference_server_num_cpus, num_gpus=cc.inference_server_num_gpus,
            name=f"inference-server-{ptype}-{j}-r{k}", max_concurrency=64,
        ).remote(self.policy_cfg, selection=self.selection, seed=seed, observation_space=self.spaces[0],
                 action_space=self.spaces[1], half_sizes=halves, num_threads=self.policy_cfg.num_threads)
        self.seeds.record("rollout_server", group=0, rank=j, restart=k, seed=seed)
        if cc.offload:
            server.set_offload.remote(True)
        return server

    def attach(self, w: int, actor: Any, preprocessor_sources: list[Any], *, needs_next_obs: bool) -> None:
        """Env runner ``w`` (``actor``) acts through its server from its next call on."""
        server, half = self.routes[w]
        self.attached[w] = self.restarts[server]
        actor.setup_remote_rollout.remote(self.servers[server], half, preprocessor_sources,
                                          needs_next_obs=needs_next_obs, has_value=self.has_value,
                                          timeout_s=self.config.cluster.call_timeout_s)

    def lost_server(self, w: int) -> bool:
        """Whether env runner ``w``'s server was recreated after it attached."""
        return self.attached[w] != self.restarts[self.routes[w][0]]

    def revive(self) -> list[int]:
        """Recreate the servers that died or stopped answering; returns them (the caller re-syncs them)."""
        cc = self.config.cluster
        dead = []
        for j, server in enumerate(self.servers):
            try:
                self.ray.get(server.weight_version.remote(), timeout=min(30.0, cc.call_timeout_s))
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.GetTimeoutError):
                dead.append(j)
        for j in dead:
            self.count_restart(f"inference server {j}")
            try:
                self.ray.kill(self.servers[j], no_restart=True)
            except Exception:
                pass
            self.restarts[j] += 1
            self.servers[j] = self._create(j)
        return dead

    def close(self) -> None:
        """Kill the servers."""
        for server in self.servers:
            try:
                self.ray.kill(server, no_restart=True)
            except Exception:
                pass


def refuse_recurrent_policy(registry: Any, policy_cfg: Any, observation_space: Any, action_space: Any) -> None:
    """Inference servers batch observations without any per-env state: refuse a recurrent policy up front.

    A probe copy is built in the driver (before the learner and the servers start) to ask ``initial_state``,
    so the user gets a config error rather than a failed actor.
    """
    from rlightning_core.errors import ConfigError
    from rlightning_core.policy.base import PolicyRole, initial_state_of

    probe = registry.resolve("policy", policy_cfg.type).build(
        policy_cfg.params, observation_space=observation_space, action_space=action_space,
        role=PolicyRole.ROLLOUT, device="cpu", seed=0)
    if initial_state_of(probe, 1) is not None:
        raise ConfigError([f"cluster.topology: policy {policy_cfg.type!r} is recurrent (it keeps a state per env), "
                           "which an inference server does not carry between requests; use the env_runner topology"])
