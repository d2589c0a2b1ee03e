"""RemoteEnvGroup: the EnvGroup API over env-runner actors (one actor per env worker)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from rlightning_core.config.schema import ClusterConfig, EnvConfig
from rlightning_core.distributed.placement import PlacementPlan
from rlightning_core.env.seeding import derive_seed

__all__ = ["RemoteEnvGroup", "actor_seed", "remote_class"]

log = logging.getLogger("rlightning")


def actor_seed(seed: int, config_index: int, worker_index: int, restart: int = 0) -> int:
    """Seed of env worker ``w`` of config ``c`` after ``restart`` restarts (recorded in the run's ledger)."""
    return derive_seed(seed, 1, config_index, worker_index, restart) if restart else \
        derive_seed(seed, 1, config_index, worker_index)


@attrs.define
class WorkerSlot:
    """What is needed to (re)create one env actor."""

    cfg: EnvConfig
    config_index: int
    worker_index: int
    label: str
    column: int
    restarts: int = 0


_REMOTE_CLASSES: dict[tuple[type, tuple[tuple[str, int], ...]], Any] = {}


def remote_class(ray: Any, cls: type, concurrency_groups: dict[str, int]) -> Any:
    """``ray.remote(cls)`` (with these concurrency groups), made once per process.

    Ray exports each remote class to the cluster on its first ``.remote()`` (once per job and class object):
    a fresh ``ray.remote`` per actor paid that export, a round trip to the GCS, for every actor and restart.
    """
    key = (cls, tuple(sorted(concurrency_groups.items())))
    if key not in _REMOTE_CLASSES:
        groups = {"concurrency_groups": dict(concurrency_groups)} if concurrency_groups else {}
        _REMOTE_CLASSES[key] = ray.remote(**groups)(cls) if groups else ray.remote(cls)
    return _REMOTE_CLASSES[key]


def _check_picklable(fns: Sequence[Any]) -> None:
    """Raise ``TypeError`` naming a preprocess fn Ray could not send to the env actors (and what in it fails)."""
    import io

    from ray.util import inspect_serializability

    from rlightning_core.env.preprocess_fn import callable_name

    for c, fn in enumerate(fns):
        if fn is None:
            continue
        ok, failures = inspect_serializability(fn, name=f"preprocess_fn[{c}]", print_file=io.StringIO())
        if not ok:
            parts = sorted(f"{_path(f)} ({type(f.obj).__name__})" for f in failures) or ["the function itself"]
            raise TypeError(f"preprocess_fn for env[{c}] ({callable_name(fn)}) cannot be pickled for the Ray env "
                            f"actors: {', '.join(parts)} cannot; use a function that refers only to picklable "
                            "objects (a module-level function importable on the workers, or one defined in the "
                            "script)")


def _path(failure: Any) -> str:
    path = getattr(failure, "path", None)
    return " -> ".join(map(str, path)) if isinstance(path, tuple | list) else str(getattr(failure, "name", "?"))


class RemoteEnvGroup:
    """Env workers as Ray actors.

    ``step_async`` / ``step_wait`` map onto actor futures, so all workers step in parallel; engines instead make
    each actor an env-runner (:meth:`EnvRunnerActor.setup_rollout`).

    ``preprocess_fn`` (one function, or one per env config) is sent to every actor of its config, which wraps
    its env worker with it (:mod:`rlightning_core.env.preprocess_fn`); each must pickle (checked here, before
    Ray starts).
    """

    def __init__(self, env_cfgs: Sequence[EnvConfig], *, seed: int, cluster: ClusterConfig, plugins: Any,
                 labels: Sequence[str] | None = None, num_threads: int = 1, plan: Any = None,
                 preprocess_fn: Any = None) -> None:
        from rlightning_core.distributed.cluster import RayCluster, import_ray_for
        from rlightning_core.env.preprocess_fn import per_config

        self.ray = import_ray_for(cluster)
        self._fns = per_config(preprocess_fn, len(env_cfgs))
        _check_picklable(self._fns)
        need = sum(c.num_workers * c.num_cpus for c in env_cfgs) + cluster.num_learners * cluster.learner_num_cpus
        self.cluster_handle = RayCluster(cluster, need).start()
        self.plan = plan if plan is not None else PlacementPlan.from_parts(cluster, env_cfgs)
        self.plan.create(self.ray, cluster.actor_start_timeout_s)
        self.seed = seed
        self.cluster = cluster
        self.selection = plugins.selection()
        self.num_threads = num_threads
        self.slots: list[WorkerSlot] = []
        names = list(labels) if labels is not None else [c.label for c in env_cfgs]
        column = 0
        for c, cfg in enumerate(env_cfgs):
            for w in range(cfg.num_workers):
                self.slots.append(WorkerSlot(cfg=cfg, config_index=c, worker_index=w, label=names[c], column=column))
                column += cfg.num_envs
        if len(self.plan.env_bundles) != len(self.slots):
            self.plan.env_bundles = [None] * len(self.slots)
        self.actors: list[Any] = [self._create(i) for i in range(len(self.slots))]
        self._spaces_refs = [a.spaces.remote() for a in self.actors]
        self._spaces: tuple[Any, Any] | None = None
        self._pending: list[Any] | None = None

    @property
    def observation_space(self) -> Any:
        """Single-env observation space (waits for the actors to start the first time)."""
        return self._check_spaces()[0]

    @property
    def action_space(self) -> Any:
        """Single-env action space."""
        return self._check_spaces()[1]

    def _check_spaces(self) -> tuple[Any, Any]:
        if self._spaces is not None:
            return self._spaces
        from rlightning_core.errors import ConfigError, UserError

        try:
            first = self.ray.get(self._spaces_refs, timeout=self.cluster.actor_start_timeout_s)
        except UserError as exc:  # an env refused its params in its actor: Ray wraps it, the user needs only it
            raise getattr(exc, "cause", exc) from None
        obs0, act0 = first[0][0], first[0][1]
        for i, (obs_space, act_space, _) in enumerate(first):
            if obs_space != obs0 or act_space != act0:
                raise ConfigError([f"env[{self.slots[i].config_index}] ({self.slots[i].label}): spaces "
                                   f"{obs_space} / {act_space} differ from env[0]'s; one policy serves the group"])
        self._spaces = (obs0, act0)
        return self._spaces

    def _create(self, index: int) -> Any:
        from rlightning_core.distributed.actors import EnvRunnerActor

        slot = self.slots[index]
        # double buffering receives weights on a second thread ("weights" group) while the default one acts
        threads = {"weights": 1} if self.cluster.weight_sync == "double_buffer" else {}
        remote = remote_class(self.ray, EnvRunnerActor, threads).options(
            num_cpus=slot.cfg.num_cpus, name=f"env-{slot.label}-{slot.worker_index}-r{slot.restarts}",
            max_concurrency=1, **self.plan.options(self.plan.env_bundles[index]))
        return remote.remote(slot.cfg, selection=self.selection, num_envs=slot.cfg.num_envs,
                             seed=actor_seed(self.seed, slot.config_index, slot.worker_index, slot.restarts),
                             worker_index=slot.worker_index, label=slot.label, column=slot.column,
                             num_threads=self.num_threads, preprocess_fn=self._fns[slot.config_index],
                             config_index=slot.config_index, restart=slot.restarts)

    def restart(self, index: int, *, close_first: bool = False) -> Any:
        """Replace the actor of worker ``index`` with a fresh one; returns the new handle.

        ``close_first``: the actor is alive and idle (its env raised or returned NaN), so its envs get
        ``cluster.close_timeout_s`` to close before it is killed; a dead or hung actor is killed at once.
        """
        if close_first:
            self._close_actors([index])
        try:
            self.ray.kill(self.actors[index], no_restart=True)
        except Exception:  # already dead
            pass
        self.slots[index].restarts += 1
        self.actors[index] = self._create(index)
        return self.actors[index]

    # -- the EnvGroup API --------------------------------------------------------------------------------
    @property
    def workers(self) -> list[Any]:
        """The actor handles."""
        return self.actors

    @property
    def num_workers(self) -> int:
        """Number of env workers."""
        return len(self.actors)

    @property
    def labels(self) -> list[str]:
        """Env-config label of every worker."""
        return [s.label for s in self.slots]

    @property
    def config_indices(self) -> list[int]:
        """Env-config index of every worker."""
        return [s.config_index for s in self.slots]

    @property
    def worker_indices(self) -> list[int]:
        """Index of every worker within its config."""
        return [s.worker_index for s in self.slots]

    @property
    def preprocess_fns(self) -> list[Any]:
        """Per worker, the preprocess fn its actor applies (``None``: none)."""
        return [self._fns[s.config_index] for s in self.slots]

    @property
    def config_preprocess_fns(self) -> list[Any]:
        """Per env config, its preprocess fn (``None``: none)."""
        return list(self._fns)

    @property
    def num_envs_per_worker(self) -> list[int]:
        """Envs of every worker."""
        return [s.cfg.num_envs for s in self.slots]

    @property
    def total_envs(self) -> int:
        """Envs across workers."""
        return sum(self.num_envs_per_worker)

    def reset(self, seed: int | None = None) -> list[np.ndarray]:
        """Reset every worker (worker ``w`` of config ``c`` seeded ``derive_seed(seed, 1, c, w)``)."""
        seeds = [None if seed is None else derive_seed(seed, 1, s.config_index, s.worker_index) for s in self.slots]
        return list(self.ray.get([a.reset_env.remote(sd) for a, sd in zip(self.actors, seeds, strict=True)]))

    def step_async(self, actions: Sequence[np.ndarray]) -> None:
        """Send one action batch to every worker; they step in parallel."""
        if self._pending is not None:
            raise RuntimeError("step_async() called twice without step_wait()")
        self._pending = [a.step.remote(act) for a, act in zip(self.actors, actions, strict=True)]

    def step_wait(self, timeout: float | None = None) -> list[Any]:
        """The :class:`StepBatch` of every worker."""
        if self._pending is None:
            raise RuntimeError("step_wait() called without step_async()")
        pending, self._pending = self._pending, None
        return list(self.ray.get(pending, timeout=timeout))

    def step(self, actions: Sequence[np.ndarray]) -> list[Any]:
        """``step_async`` then ``step_wait``."""
        self.step_async(actions)
        return self.step_wait()

    def _close_actors(self, indices: Sequence[int]) -> None:
        """Run ``close()`` on these actors (envs, process group, shared memory) at once.

        Waits at most ``cluster.close_timeout_s``; failures and timeouts are logged, never raised (the actors
        are killed next either way).
        """
        calls = {}
        for i in indices:
            try:
                calls[self.actors[i].close.remote()] = i
            except Exception:  # a handle Ray no longer accepts calls on: nothing to close
                continue
        if not calls:
            return
        timeout = self.cluster.close_timeout_s
        done, pending = self.ray.wait(list(calls), num_returns=len(calls), timeout=timeout)
        for ref in done:
            try:
                self.ray.get(ref)
            except self.ray.exceptions.RayActorError:
                continue  # the actor is already dead: its envs went with it
            except Exception as exc:
                slot = self.slots[calls[ref]]
                log.warning("env[%d] (%s) worker %d: close() failed: %s", slot.config_index, slot.label,
                            slot.worker_index, str(exc).strip().splitlines()[-1] if str(exc).strip() else exc)
        for ref in pending:
            slot = self.slots[calls[ref]]
            log.warning("env[%d] (%s) worker %d: close() did not finish within cluster.close_timeout_s=%gs; the "
                        "actor is killed", slot.config_index, slot.label, slot.worker_index, timeout)

    def close(self) -> None:
        """Close every actor's envs (:meth:`_close_actors`), kill the actors, shut down a cluster we started.

        Closing first lets a simulator shut down cleanly (child processes, files, GPU contexts) instead of
        being orphaned by the kill.
        """
        self._close_actors(range(len(self.actors)))
        for a in self.actors:
            try:
                self.ray.kill(a, no_restart=True)
            except Exception:
                pass
        self.actors = []
        self.plan.remove(self.ray)
        self.cluster_handle.shutdown()
