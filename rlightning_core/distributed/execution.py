"""RayExecution: env-runner actors, a learner actor holding the buffer, and collective weight sync.

The driver passes object refs and small metric dicts only: chunks travel from env-runner actors to the learner
through the object store (numpy, zero-copy), weights travel learner -> runners by bucketed torch.distributed
broadcast (``broadcast``, gloo on CPU / nccl on GPU) or one ``ray.put`` (``object_store``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

from rlightning_core.buffer.base import BufferSpec
from rlightning_core.config.schema import MainConfig
from rlightning_core.distributed.cluster import RayCluster
from rlightning_core.distributed.deadlines import (
    Deadline,
    RunnerTimeout,
    env_work_deadline,
    name_runner,
)
from rlightning_core.distributed.env_group import RemoteEnvGroup
from rlightning_core.distributed.inference_servers import InferenceServers, refuse_recurrent_policy
from rlightning_core.distributed.learner_group import LearnerGroup
from rlightning_core.distributed.placement import PlacementPlan
from rlightning_core.distributed.plan import SyncPlan, needs_weights_size, weight_sync_plan
from rlightning_core.distributed.ray_common import REPLY_SYNC_MAX_BYTES, WorkerFailure, get, mean_metrics, strip_private
from rlightning_core.distributed.restarts import RunnerRecreation, wait_each
from rlightning_core.distributed.seed_ledger import SeedLedger
from rlightning_core.distributed.streaming import StreamingCalls
from rlightning_core.distributed.weight_check import WeightSyncMismatch
from rlightning_core.distributed.weight_sync import WeightSync, group_backend
from rlightning_core.engine.execution import build_preprocessors, column_labels
from rlightning_core.env.runner import EnvStepError, RolloutStats
from rlightning_core.env.seeding import derive_seed
from rlightning_core.errors import ConfigError, RestartsUsedUpError

__all__ = ["REPLY_SYNC_MAX_BYTES", "RayExecution", "WeightSyncMismatch", "WorkerFailure", "check_resources",
           "mean_metrics"]

log = logging.getLogger("rlightning")



def check_resources(config: MainConfig, available: dict[str, float]) -> None:
    """Refuse up front a run whose actors cannot all be placed (instead of waiting for resources forever)."""
    from rlightning_core.distributed.cluster import required_cpus

    cc = config.cluster
    need_cpu = required_cpus(config)
    need_gpu = cc.num_learners * cc.learner_num_gpus + cc.num_inference_servers * cc.inference_server_num_gpus
    problems = []
    if need_cpu > available.get("CPU", 0.0) + 1e-9:
        envs = " + ".join(f"{e.num_workers} env worker(s) x {e.num_cpus}" for e in config.env)
        problems.append(f"cluster: the run's actors reserve {need_cpu:g} CPUs ({envs} + {cc.num_learners} "
                        f"learner(s) x {cc.learner_num_cpus}) but the cluster has {available.get('CPU', 0):g}; "
                        "lower env[*].num_cpus / cluster.learner_num_cpus or raise cluster.num_cpus")
    if need_gpu > available.get("GPU", 0.0) + 1e-9:
        problems.append(f"cluster: the run's actors reserve {need_gpu:g} GPUs but the cluster has "
                        f"{available.get('GPU', 0):g}; set cluster.learner_num_gpus: 0 to train on CPU")
    if problems:
        raise ConfigError(problems)


class RayExecution(StreamingCalls):
    """:class:`~rlightning_core.engine.contract.Execution` on a Ray cluster: submitted work runs in actors."""

    mode = "ray"
    concurrent = True

    def __init__(self, config: MainConfig, env_group: Any, policy_group: Any, buffer: Any, plugins: Any, *,
                 rollout_steps: int) -> None:
        self.config = config
        self.plugins = plugins
        self._closed = False
        # preprocessors given to build_data_buffer replace the config's; each runner builds its own copy of each
        given = list(getattr(buffer, "preprocessors", None) or [])
        self.preprocessors_given = bool(given)
        self._preprocessor_sources: list[Any] = ([(type(p), p.params) for p in given] if given
                                                 else list(config.preprocessors))
        self.policy_cfg = policy_group.policy_cfg
        self.backend_override = getattr(policy_group, "backend", "auto")  # build_policy_group(backend=...)
        cc = config.cluster  # combinations no run can start with were refused when the config was built
        self.inference_server = cc.topology == "inference_server"
        # how weights travel; final once the weights' size is known
        self.sync_plan: SyncPlan = weight_sync_plan(config)
        self.startup: dict[str, float] = {}
        clock = time.perf_counter
        t0 = clock()
        self.cluster = RayCluster.for_run(config).start()
        import ray

        self.ray = ray
        # Ray was started by whoever came first: this execution, or the env group the builders made before it
        started_by_group = getattr(getattr(env_group, "cluster_handle", None), "init_s", 0.0)
        self.startup["ray_init_s"] = self.cluster.init_s or started_by_group
        check_resources(config, ray.cluster_resources())
        # env actors (reuse a RemoteEnvGroup the caller built, else build one from the config)
        t1 = clock()
        self.owns_env_group = not isinstance(env_group, RemoteEnvGroup)
        self.env_group = (RemoteEnvGroup(config.env, seed=config.seed, cluster=cc, plugins=plugins,
                                         labels=getattr(env_group, "labels", None),
                                         num_threads=self.policy_cfg.num_threads, plan=PlacementPlan.for_run(config),
                                         preprocess_fn=getattr(env_group, "config_preprocess_fns", None))
                          if self.owns_env_group else env_group)
        # the learners, each with its buffer: their processes start while the env actors start
        self.selection = plugins.selection()
        self.learner_group = LearnerGroup(ray, config, self.policy_cfg, self.selection, plugins,
                                          self.env_group.plan)
        self.learners = self.learner_group.learners
        self.learner: Any = self.learner_group.learner  # rank 0: sync source, checkpointed, evaluated
        self.world_size = self.learner_group.world_size
        self.in_process = self.learner_group.in_driver  # the learner lives in this (the driver's) process
        self.recreation = RunnerRecreation(self)  # failed env runners, recreated in rounds
        self.seeds = SeedLedger()  # every worker's seed by (group, rank, restart), into RUN_DIR/seeds.jsonl
        for r in range(self.world_size):
            self.seeds.record("learner", group=0, rank=r, restart=0, seed=derive_seed(config.seed, 3, r))
        for i in range(len(self.env_group.slots)):
            self._record_runner_seeds(i)
        self.observation_space = self.env_group.observation_space
        self.action_space = self.env_group.action_space
        if self.inference_server:
            refuse_recurrent_policy(self.plugins.registry, self.policy_cfg, self.observation_space,
                                    self.action_space)
        self.startup["env_actors_s"] = clock() - t1
        t2 = clock()
        prebuild: list[Any] = []
        if not self.inference_server:  # the runners build their copies while the learner builds
            prebuild = [a.build_rollout_policy.remote(self.policy_cfg, policy_seed=self._policy_seed(w))
                        for w, a in enumerate(self.env_group.actors)]
        bname = buffer.spec.qualified_name if hasattr(buffer, "spec") else config.buffer.type
        bparams = buffer.params if hasattr(buffer, "params") else config.buffer.params
        extras = self.learner_group.build(self.observation_space, self.action_space)
        self.needs_next_obs = self.learner_group.bind_buffer(
            bname, bparams, [self._shard_spec(r, rollout_steps, extras) for r in range(self.world_size)])
        self.startup["learner_s"] = clock() - t2
        self._buffer_args = (bname, bparams, rollout_steps, extras)
        if self.world_size > 1:
            t_dp = clock()
            self.learner_group.form_data_parallel(group_backend(ray, config, self.backend_override, self.learners))
            self.startup["data_parallel_s"] = clock() - t_dp
        # how weights travel: weight_sync_plan, the function --dry-run prints
        measured = None
        if needs_weights_size(config):
            measured = float(self._get(self.learner.weights_nbytes.remote(), cc.call_timeout_s, "size the weights"))
        self.sync_plan = weight_sync_plan(config, weights_nbytes=None if measured is None else int(measured))
        # rollout copies inside the env actors, or inference servers the env actors ask every step
        t3 = clock()
        self.restarts = 0  # env runners and inference servers recreated, within cluster.max_restarts
        self.inference: InferenceServers | None = None
        if self.inference_server:
            self.inference = InferenceServers(ray, config, self.policy_cfg, self.selection, self.seeds,
                                              (self.observation_space, self.action_space),
                                              len(self.env_group.actors), self._count_restart)
        for w, actor in enumerate(self.env_group.actors):
            self._setup_runner(w, actor)
        self._get([*prebuild, *(a.weight_version.remote() for a in self.env_group.actors)],
                  cc.actor_start_timeout_s, "build the rollout policies")
        self.sharded = bool(cc.sharded_buffer)
        if self.sharded:
            self._bind_shards(list(range(len(self.env_group.actors))))
        self.startup["rollout_setup_s"] = clock() - t3
        self.preprocessors = given or build_preprocessors(config, plugins.registry, self.observation_space,
                                                          self.env_group.total_envs)
        t4 = clock()
        self.weight_sync = WeightSync(
            ray, config, self.sync_plan, learner=self.learner, copies=lambda: self.rollout_actors,
            member_name=self._copy_name, runner_name=self._runner_name, in_driver=self.in_process,
            servers=self.inference_server, backend_override=self.backend_override, nbytes=measured or 0.0)
        self.weight_sync.start()
        self.startup["process_group_s"] = clock() - t4
        t5 = clock()
        self._sync(blocking=True)  # the first sync completes at once
        self.startup["first_sync_s"] = clock() - t5
        self.startup["total_s"] = clock() - t0 + (0.0 if self.cluster.init_s else started_by_group)
        self._pending_chunks: list[Any] = []
        self._eval_policy: Any = None
        self._eval_version = -1
        self._in_flight: dict[int, list[int]] = {}  # per runner: steps of the streamed collects it has queued
        log.info("ray startup: %s", ", ".join(f"{k[:-2]} {v:.2f}s" for k, v in self.startup.items()))

    # -- helpers -----------------------------------------------------------------------------------------
    def _get(self, refs: Any, timeout: float, what: str) -> Any:
        return get(self.ray, refs, timeout, what)

    def _shard_spec(self, rank: int, rollout_steps: int, extras: dict[str, Any]) -> BufferSpec:
        """The buffer (shard) of learner ``rank``: an equal slice of every worker's env columns."""
        w = self.world_size
        labels = [lbl for lbl, n in zip(self.env_group.labels, self.env_group.num_envs_per_worker, strict=True)
                  for _ in range(n // w)]
        return BufferSpec(observation_space=self.observation_space, action_space=self.action_space,
                          num_envs=self.env_group.total_envs // w, num_steps=rollout_steps, extras_spec=extras,
                          column_labels=labels if w > 1 else column_labels(self.env_group), device="cpu",
                          seed=self.config.seed if rank == 0 else derive_seed(self.config.seed, 6, rank))

    def _bind_shards(self, indices: list[int]) -> None:
        """``cluster.sharded_buffer``: a buffer shard in each of these runners; the learner reads across them."""
        cc = self.config.cluster
        bname, bparams, steps, extras = self._buffer_args
        kind = self._get(self.learner.buffer_kind.remote(), cc.call_timeout_s, "query the buffer")
        self.shard_on_policy = kind == "on_policy"
        for i in indices:
            slot = self.env_group.slots[i]
            spec = BufferSpec(observation_space=self.observation_space, action_space=self.action_space,
                              num_envs=slot.cfg.num_envs, num_steps=steps, extras_spec=extras,
                              column_labels=[slot.label] * slot.cfg.num_envs, device="cpu",
                              seed=derive_seed(self.config.seed, 7, i, slot.restarts))
            self.env_group.actors[i].bind_shard.remote(bname, bparams, spec, self.shard_on_policy, self.world_size)
        self._get([ln.attach_shards.remote(self.env_group.actors, self.shard_on_policy, cc.call_timeout_s)
                   for ln in self.learners], cc.call_timeout_s, "attach the buffer shards")

    def _policy_seed(self, w: int) -> int:
        restarts = self.env_group.slots[w].restarts
        return derive_seed(self.config.seed, 4, w, restarts) if restarts else derive_seed(self.config.seed, 4, w)

    def _record_runner_seeds(self, w: int) -> None:
        from rlightning_core.distributed.env_group import actor_seed

        slot = self.env_group.slots[w]
        self.seeds.record("env", group=slot.config_index, rank=slot.worker_index, restart=slot.restarts,
                          seed=actor_seed(self.config.seed, slot.config_index, slot.worker_index, slot.restarts),
                          label=slot.label)
        if not self.inference_server:  # else the rollout copies live in the servers (recorded with them)
            self.seeds.record("rollout", group=slot.config_index, rank=slot.worker_index, restart=slot.restarts,
                              seed=self._policy_seed(w))

    def attach_run_dir(self, run_dir: Any) -> None:
        """The run directory exists: the seed ledger starts writing ``seeds.jsonl`` there."""
        self.seeds.attach(run_dir)

    @property
    def servers(self) -> list[Any]:
        """The inference servers (none in the env-runner topology)."""
        return self.inference.servers if self.inference is not None else []

    @property
    def server_restarts(self) -> list[int]:
        """Restarts of each inference server."""
        return self.inference.restarts if self.inference is not None else []

    def _count_restart(self, who: str) -> None:
        """One more worker recreated (``who`` names it), within ``cluster.max_restarts``."""
        cc = self.config.cluster
        self.restarts += 1
        if self.restarts > cc.max_restarts:
            raise RestartsUsedUpError(who, cc.max_restarts)
        log.warning("%s failed; recreating it (restart %d of %d)", who, self.restarts, cc.max_restarts)

    def _revive_servers(self) -> None:
        """Recreate dead inference servers and re-sync them before any env runner asks them again."""
        dead = self.inference.revive() if self.inference is not None else []
        if dead:
            self.weight_sync.resync(dead)

    @property
    def rollout_actors(self) -> list[Any]:
        """The actors holding rollout copies of the weights: inference servers, or the env runners."""
        return self.servers if self.inference_server else self.env_group.actors

    def _setup_runner(self, w: int, actor: Any) -> None:
        if self.config.cluster.offload:  # a GPU rollout copy leaves the GPU while the learner learns
            actor.set_offload.remote(True)
        if self.inference is not None:
            self.inference.attach(w, actor, self._preprocessor_sources, needs_next_obs=self.needs_next_obs)
            return
        actor.setup_rollout.remote(self.policy_cfg, self._preprocessor_sources, policy_seed=self._policy_seed(w),
                                   needs_next_obs=self.needs_next_obs)

    def _copy_name(self, index: int) -> str:
        """How messages name rollout copy ``index``: an inference server or an env runner."""
        return f"inference server {index}" if self.inference_server else name_runner(self.env_group.slots[index])

    def _runner_name(self, index: int) -> str:
        slot = self.env_group.slots[index]
        return f"env worker {index} (env[{slot.config_index}] {slot.label}, worker {slot.worker_index})"

    @property
    def version(self) -> int:
        """The version of the weights the last sync sent."""
        return self.weight_sync.version

    @version.setter
    def version(self, value: int) -> None:
        self.weight_sync.version = value

    @property
    def strategy(self) -> str:
        """The weight sync's mechanism (:attr:`~.plan.SyncPlan.strategy`)."""
        return self.sync_plan.strategy

    @property
    def verified_copies(self) -> int:
        """Rollout-copy reports found equal to the learner's weights so far."""
        return self.weight_sync.check.verified_copies

    # -- the execution interface ---------------------------------------------------------------------------
    def reset(self, seed: int) -> None:
        """Reset every env runner with its derived seed."""
        slots = self.env_group.slots
        refs = {i: a.reset.remote(derive_seed(seed, 1, s.config_index, s.worker_index))
                for i, (a, s) in enumerate(zip(self.env_group.actors, slots, strict=True))}
        # a worker whose reset fails or hangs is recreated (it resets itself)
        self._restart_runners(wait_each(self.ray, refs, {i: self._env_deadline(i, 1) for i in refs}, "its reset"))

    def _env_deadline(self, index: int, steps: int) -> Deadline:
        """How long ``steps`` env steps of worker ``index`` may take before it counts as hung and is recreated.

        ``env.step_timeout_s`` per step (+1 for the call), capped by ``cluster.call_timeout_s``
        (:func:`~rlightning_core.distributed.deadlines.env_work_deadline`).
        """
        return env_work_deadline(self.env_group.slots[index].cfg.step_timeout_s, self.config.cluster.call_timeout_s,
                                 steps)

    def collect(self, num_steps: int) -> list[RolloutStats]:
        """Every env runner collects a chunk in parallel; the chunks stay in the object store for :meth:`learn`.

        A runner that dies, hangs past its collect deadline (:mod:`.deadlines`), or whose env raises is recreated
        and collects again.
        """
        ride = self.weight_sync.take_ride()
        calls = [a.collect.options(num_returns=2).remote(num_steps, *ride) for a in self.env_group.actors]
        chunks: list[Any] = [c[0] for c in calls]
        todo = {i: c[1] for i, c in enumerate(calls)}
        stats: list[Any] = [None] * len(calls)
        faults = [0] * len(calls)
        submitted = dict.fromkeys(range(len(calls)), time.monotonic())  # each collect's deadline counts from here
        while todo:
            failed: list[tuple[int, BaseException]] = []
            for i, ref in list(todo.items()):
                deadline = self._env_deadline(i, num_steps)
                try:
                    stats[i] = self.ray.get(ref, timeout=max(0.0, submitted[i] + deadline.seconds - time.monotonic()))
                    del todo[i]
                except self.ray.exceptions.GetTimeoutError:
                    failed.append((i, RunnerTimeout(f"its collect of {num_steps} steps", deadline)))
                except (self.ray.exceptions.RayActorError, EnvStepError) as exc:
                    failed.append((i, exc))
            # recreate every failed runner (all at once: the weight-sync group is re-formed without a hung one),
            # then collect again
            for i, n in self._restart_runners(failed).items():
                faults[i] += n
            for i, _ in failed:
                chunks[i], todo[i] = self.env_group.actors[i].collect.options(num_returns=2).remote(num_steps)
                submitted[i] = time.monotonic()
        for i, n in enumerate(faults):
            if n:
                stats[i].restarts += n
                stats[i].dropped_episodes += n * self.env_group.slots[i].cfg.num_envs
        self.weight_sync.finish()  # ran before the chunks on every runner; a restart above already re-synced
        self.weight_sync.check.check_reports(stats)  # the runners' fingerprints of the weights they collected with
        self._pending_chunks = chunks
        self._merge_preprocessors(stats)
        return stats

    def _restart_runner(self, index: int, exc: BaseException) -> Any:
        """Recreate runner ``index`` (:meth:`_restart_runners`); returns its new handle."""
        self._restart_runners([(index, exc)])
        return self.env_group.actors[index]

    def _restart_runners(self, failed: Sequence[tuple[int, BaseException]]) -> dict[int, int]:
        """Recreate every runner in ``failed`` at once (:class:`~.restarts.RunnerRecreation`); restarts per runner."""
        return self.recreation.restart_runners(failed)

    def _merge_preprocessors(self, stats: list[Any]) -> None:
        for k, pre in enumerate(self.preprocessors):
            states = [s.preprocessor_states[k] for s in stats if s.preprocessor_states]
            if states:
                pre.merge(states)

    def learn(self, progress: float) -> dict[str, float]:
        """The learner stores the chunks of the last :meth:`collect` (Ray hands it the refs) and updates."""
        chunks, self._pending_chunks = self._pending_chunks, []
        if self.config.cluster.offload:  # the rollout copies idle while the learner learns
            for a in self.rollout_actors:
                a.offload_idle.remote()
        metrics, weights, fp = self.learner_group.learn(progress, chunks, with_weights=self.weight_sync.rides_reply)
        self.weight_sync.fresh = None if weights is None else (weights, fp)
        return metrics

    def sync(self) -> tuple[int, dict[str, float]]:
        """Push the learner's weights (and merged preprocessor statistics) to every rollout copy."""
        return self._sync(blocking=False)

    def _sync(self, *, blocking: bool) -> tuple[int, dict[str, float]]:
        t0 = time.perf_counter()
        version, metrics = self.weight_sync.sync(blocking=blocking)
        self._push_preprocessors()
        if self.config.cluster.offload:  # the learners are idle until the next learn: free their GPU memory
            self.learner_group.offload_idle()
        metrics["sync/seconds"] = time.perf_counter() - t0
        metrics["sync/version"] = float(version)
        metrics["fault/worker_restarts"] = float(self.restarts)
        return version, metrics

    def _push_preprocessors(self) -> None:
        """The merged preprocessor statistics to every env runner, ordered before its next collect."""
        if self.preprocessors:
            states = [strip_private(p.state_dict()) for p in self.preprocessors]
            for a in self.env_group.actors:
                a.load_preprocessor_states.remote(states)

    def eval_policy(self) -> Any:
        """A policy in the driver holding the learner's current weights (for evaluation)."""
        from rlightning_core.policy.base import PolicyRole
        from rlightning_core.policy.group import resolve_device

        if self._eval_policy is None:
            spec = self.plugins.registry.resolve("policy", self.policy_cfg.type)
            device = resolve_device(self.policy_cfg.rollout_device, "policy.rollout_device")
            self._eval_policy = spec.build(self.policy_cfg.params, observation_space=self.observation_space,
                                           action_space=self.action_space, role=PolicyRole.ROLLOUT, device=device,
                                           seed=derive_seed(self.config.seed, 4, 999))
        if self._eval_version != self.version:
            weights = self._get(self.learner.get_weights.remote(), self.config.cluster.call_timeout_s,
                                "fetch weights for evaluation")
            self._eval_policy.set_weights(weights, self.version)
            self._eval_version = self.version
        return self._eval_policy

    def state_dict(self) -> dict[str, Any]:
        """Learner + buffer (from the learner actor), merged preprocessors, env runners, weight version."""
        learner, buffer = self.learner_group.state_dict()
        return {"policy": {"learner": learner, "version": self.version}, "buffer": buffer,
                "preprocessors": [p.state_dict() for p in self.preprocessors], "runners": self._runner_states()}

    def _runner_states(self) -> list[dict[str, Any]]:
        """Every env runner's state for a checkpoint, each within its env-work deadline (:mod:`.deadlines`).

        A runner that dies meanwhile, or misses its deadline (it is killed then), does not fail the checkpoint:
        its entry holds no env state, so a run resumed from it resets that runner's envs (as for envs that
        cannot save their state), and the runner is recreated by its next call like any runner that died
        (within ``cluster.max_restarts``, counted there).
        """
        refs = [a.state_dict.remote() for a in self.env_group.actors]
        start = time.monotonic()
        states: list[dict[str, Any]] = []
        for i, ref in enumerate(refs):
            slot = self.env_group.slots[i]
            deadline = env_work_deadline(slot.cfg.step_timeout_s, self.config.cluster.call_timeout_s,
                                         sum(self._in_flight.get(i, ())))
            try:
                states.append(self.ray.get(ref, timeout=max(0.0, start + deadline.seconds - time.monotonic())))
                continue
            except self.ray.exceptions.RayActorError:
                what = "died"
            except self.ray.exceptions.GetTimeoutError:
                what = f"did not report its state within {deadline.describe()}"
                with contextlib.suppress(Exception):  # hung: killed, so that its next call recreates it
                    self.ray.kill(self.env_group.actors[i], no_restart=True)
            log.warning("%s %s while the checkpoint was being taken: the checkpoint holds no state of its envs "
                        "(a run resumed from it resets them) and the runner is recreated", name_runner(slot), what)
            states.append({"obs": None, "worker": None})
        return states

    def load_state_dict(self, state: dict[str, Any]) -> list[bool]:
        """Restore; a different number of env workers than at save time resets the envs instead."""
        timeout = self.config.cluster.call_timeout_s
        self.learner_group.load_state_dict(state["policy"]["learner"], state["buffer"])
        for p, s in zip(self.preprocessors, state["preprocessors"], strict=True):
            p.load_state_dict(s)
        self.version = int(state["policy"]["version"]) - 1
        self._sync(blocking=True)
        saved = state["runners"]
        if len(saved) != len(self.env_group.actors):
            return [False] * len(self.env_group.actors)
        return list(self._get([a.load_state_dict.remote(s) for a, s in zip(self.env_group.actors, saved,
                                                                           strict=True)], timeout, "restore envs"))

    def reseed_runner(self, index: int, seed: int) -> None:
        """Reset one env runner with ``seed``."""
        self.env_group.actors[index].reset.remote(seed)

    def close(self) -> None:
        """Kill the actors; shut the cluster down if this run started it. A second call does nothing."""
        if self._closed:
            return
        self._closed = True
        self.seeds.close()
        self.weight_sync.close()
        if self.inference is not None:
            self.inference.close()
        self.learner_group.close()
        if self.owns_env_group:  # else the caller's RemoteEnvGroup (and the cluster it started) stay up
            self.env_group.close()
            self.cluster.shutdown()
