"""A run's plan: every component with its provider, the workers, the schedule and, on Ray, how weights travel.

One function, :func:`describe_plan`, writes it for ``train --dry-run`` and for the run's start-up log, so the
two cannot drift: the run passes the weight sync its execution chose
(:func:`~rlightning_core.distributed.plan.weight_sync_plan`), the dry run the same decision made from the config
and, where that decision depends on it, the size of the policy's weights (:func:`dry_run_sync`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["describe_plan", "dry_run_sync", "measure_weights_nbytes"]


def _checkpoints(c: Any) -> str:
    """When checkpoints are written (``checkpoint.every`` 0: only when the run stops)."""
    if c.every:
        when = f"every {c.every} iteration(s)" + (" and at the end" if c.at_end else "")
    elif c.at_end:
        when = "at the end only (checkpoint.every: 0)"
    else:
        when = "only when a signal stops the run (checkpoint.every: 0, checkpoint.at_end: false)"
    return f"checkpoints: {when}, keep last {c.keep_last}" + (" + best" if c.keep_best else "")


def describe_plan(config: Any, *, source: str | None = None, run_dir: str | None = None, sync: Any = None,
                  plugins: Any = None) -> list[str]:
    """Human-readable plan: a header line, then indented lines (components, workers, schedule, Ray parts).

    Args:
        config: the run's config.
        source: the config file named in the header (``None``: none named).
        run_dir: the run directory (``None``: the default one, created at start).
        sync: the run's :class:`~rlightning_core.distributed.plan.SyncPlan` (ray mode); ``None`` decides it
            from the config alone.
        plugins: the plugin set that resolves the components (default: the process's).
    """
    from rlightning_core.config import component_slots
    from rlightning_core.plugins import get_plugins

    registry = (plugins or get_plugins()).registry
    named = f" for {source}" if source else ""
    lines = [f"Plan{named} (mode: {config.cluster.mode}, seed {config.seed})"]
    for path, kind, comp in component_slots(config):
        spec = registry.resolve(kind, comp.type)
        lines.append(f"  {path}: {kind} {spec.name!r} from {spec.distribution} {spec.version}")
    total_envs = 0
    for i, env in enumerate(config.env):
        total_envs += env.num_workers * env.num_envs
        lines.append(f"  workers env[{i}] {env.label}: {env.num_workers} worker(s) x {env.num_envs} env(s)"
                     + (f", {env.num_cpus} CPU each" if config.cluster.mode == "ray" else ""))
    p = config.policy
    where = (f"{config.cluster.num_learners} x {p.type}" if config.cluster.num_learners or
             config.cluster.mode != "ray" else f"{p.type} in the driver process (cluster.num_learners: 0)")
    lines.append(f"  learner: {where} on {p.device}; rollout copies on {p.rollout_device}; "
                 f"{p.num_threads} torch thread(s)")
    steps = getattr(config.engine.params, "rollout_steps", None)
    if steps:
        per_it = steps * total_envs
        its = -(-config.engine.total_steps // per_it)
        lines.append(f"  schedule: {steps} steps x {total_envs} envs = {per_it} transitions per iteration, "
                     f"~{its} iterations for {config.engine.total_steps} env steps")
    e = config.engine
    ev = f"every {e.eval_every} iterations" if e.eval_every else "at the end"
    lines.append(f"  evaluation: {e.eval_episodes} deterministic episodes {ev}"
                 + (f", stop at return >= {e.target_eval_return}" if e.target_eval_return is not None else ""))
    lines.append(f"  {_checkpoints(config.checkpoint)}")
    loggers = ", ".join(["metrics.jsonl", *(lg.type for lg in config.logging.loggers)])
    lines.append(f"  loggers: {loggers}")
    if config.cluster.mode == "ray":
        from rlightning_core.distributed.cluster import cluster_target
        from rlightning_core.distributed.placement import PlacementPlan
        from rlightning_core.distributed.plan import describe_ray_plan

        labels = [e.label for e in config.env for _ in range(e.num_workers)]
        lines.extend(f"  {x}" for x in PlacementPlan.for_run(config).describe(labels))
        lines.extend(f"  {x}" for x in describe_ray_plan(config, labels, sync))
        lines.append(f"  cluster: {cluster_target(config.cluster).description}")
    lines.append(f"  run dir: {run_dir or config.run_dir or 'runs/<name>-<timestamp> (created at start)'}")
    return lines


def measure_weights_nbytes(config: Any) -> int | None:
    """Bytes of the learner policy's weights, as the Ray execution measures them (``None``: cannot know here).

    Builds one env of ``env[0]`` (its evaluation stand-in, e.g. a remote env's ``local_env``) for the spaces and
    the learner policy on CPU. An env served by remote clients and no local stand-in has no spaces before the
    clients connect: ``None``.
    """
    import attrs

    from rlightning_core.distributed.learner import LearnerActor
    from rlightning_core.env.remote.params import RemoteEnvParams
    from rlightning_core.env.seeding import derive_seed
    from rlightning_core.plugins import get_plugins

    plugins = get_plugins()
    env_cfg = config.env[0]
    stand_in = getattr(env_cfg.params, "eval_env_config", None)  # as evaluation builds it
    env_cfg = stand_in(env_cfg) if callable(stand_in) else env_cfg
    if isinstance(env_cfg.params, RemoteEnvParams):
        return None
    worker = plugins.registry.resolve("env", env_cfg.type).build(env_cfg.params, num_envs=1, seed=config.seed,
                                                                 worker_index=0)
    try:
        spaces = worker.observation_space, worker.action_space
    finally:
        worker.close()
    learner = LearnerActor(attrs.evolve(config.policy, device="cpu"), selection=plugins.selection(),
                           seed=derive_seed(config.seed, 3, 0), num_threads=config.policy.num_threads,
                           plugins=plugins)
    learner.build(*spaces)
    return learner.weights_nbytes()


def dry_run_sync(config: Any) -> Any:
    """The weight sync a ray-mode run of ``config`` will use, for ``train --dry-run`` (``None`` in local mode).

    Where ``weight_sync: auto`` decides by the size of the policy's weights, it is measured here (that builds
    one env and the policy: torch is imported); otherwise nothing is built.
    """
    if config.cluster.mode != "ray":
        return None
    from rlightning_core.distributed.plan import needs_weights_size, weight_sync_plan

    nbytes = measure_weights_nbytes(config) if needs_weights_size(config) else None
    return weight_sync_plan(config, weights_nbytes=nbytes)
