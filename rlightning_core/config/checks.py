"""Cross-field checks of a whole run config: combinations of settings that no run can start with.

:class:`~rlightning_core.config.schema.MainConfig` runs :func:`run_problems` when it is built, so
``config validate``, ``train --dry-run`` and a library caller's ``MainConfig(...)`` refuse these before anything
starts (Ray, env actors, learners); the runtime code may take the combinations it is given as possible. Only what
the config alone decides belongs here: what depends on the cluster's resources or on built envs is checked when
they exist.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SYNC_ENGINES", "placement_problems", "run_problems"]

#: ``engine.type`` values naming the synchronous on-policy engine (the in-driver learner and the line need it).
SYNC_ENGINES = ("sync", "rlightning:sync")


def run_problems(cfg: Any) -> list[str]:
    """Every problem of ``cfg`` (a ``MainConfig``) that only a combination of its settings shows; one line each.

    Besides core's own rules, each component whose structured params define ``run_problems(component, config)``
    is asked (see :class:`~rlightning_core.config.schema.ComponentConfig`); params still held as plain data (before
    the plugins resolve them) are not.
    """
    problems = _ray_problems(cfg) if cfg.cluster.mode == "ray" else _local_problems(cfg)
    for path, comp in _components(cfg):
        check = getattr(comp.params, "run_problems", None)
        if callable(check) and not isinstance(comp.params, dict):
            problems.extend(f"{path}.{line}" for line in check(comp, cfg))
    return problems


def _components(cfg: Any) -> list[tuple[str, Any]]:
    return [*((f"env[{i}]", e) for i, e in enumerate(cfg.env)), ("policy", cfg.policy), ("buffer", cfg.buffer),
            *((f"preprocessors[{i}]", p) for i, p in enumerate(cfg.preprocessors)), ("engine", cfg.engine),
            *((f"logging.loggers[{i}]", lg) for i, lg in enumerate(cfg.logging.loggers))]


def _local_problems(cfg: Any) -> list[str]:
    cc = cfg.cluster
    if cc.num_learners > 1:
        return [f"cluster.num_learners: {cc.num_learners} learners need cluster.mode: ray (data-parallel "
                "training); local mode trains with one"]
    return []


def _ray_problems(cfg: Any) -> list[str]:
    cc, problems = cfg.cluster, []
    if cc.weight_sync == "local":
        problems.append("cluster.weight_sync: 'local' copies weights inside one process; in ray mode use "
                        "'broadcast' or 'object_store' (or auto)")
    if cc.topology == "inference_server":
        if cc.num_inference_servers < 1:
            problems.append("cluster.num_inference_servers: the inference_server topology needs at least 1 inference "
                            "server (it batches the env workers' observations)")
        if cc.weight_sync == "double_buffer":
            problems.append("cluster.weight_sync: double_buffer swaps weights between an env runner's steps; with "
                            "topology inference_server use broadcast, object_store or node_shared")
    if cc.num_learners > 1:
        problems.extend(f"env[{i}].num_envs: {e.num_envs} envs per worker cannot be split evenly over "
                        f"cluster.num_learners={cc.num_learners} data-parallel learners; use a multiple of it"
                        for i, e in enumerate(cfg.env) if e.num_envs % cc.num_learners)
    if cc.num_learners == 0:
        problems.extend(_in_driver_problems(cfg))
    elif cfg.policy.device.startswith("cuda") and not cc.learner_num_gpus:
        problems.append(f"policy.device: {cfg.policy.device!r} puts the learner on a GPU, but its actor reserves "
                        "none (cluster.learner_num_gpus: 0), so Ray hides the GPUs from it; set "
                        "cluster.learner_num_gpus (e.g. 1), or policy.device: auto")
    problems.extend(placement_problems(cc, cfg.env))
    return problems


def _in_driver_problems(cfg: Any) -> list[str]:
    """``cluster.num_learners: 0`` (the learner in the driver): what needs a learner actor."""
    cc, problems = cfg.cluster, []
    if cfg.engine.type not in SYNC_ENGINES:
        problems.append(f"engine.type: {cfg.engine.type!r} with cluster.num_learners: 0 (the learner in the "
                        "driver): only the sync engine drives an in-process learner; use cluster.num_learners: 1 "
                        "(or more)")
    if cc.weight_sync not in ("auto", "object_store", "local"):  # `local` has its own line above
        problems.append(f"cluster.weight_sync: {cc.weight_sync!r} needs a learner actor in the weight-sync group; "
                        "with cluster.num_learners: 0 use auto or object_store")
    if cc.placement != "default":
        problems.append(f"cluster.placement: {cc.placement!r} places a learner actor; with cluster.num_learners: "
                        "0 the learner is the driver, so use default")
    for key, on in (("cluster.sharded_buffer", cc.sharded_buffer), ("cluster.offload", cc.offload),
                    ("cluster.topology: inference_server", cc.topology == "inference_server")):
        if on:
            problems.append(f"{key}: not available with cluster.num_learners: 0 (the learner in the driver); use "
                            "cluster.num_learners: 1")
    if cfg.policy.device not in ("cpu", "auto"):
        problems.append(f"policy.device: {cfg.policy.device!r}: with cluster.num_learners: 0 the learner runs in "
                        "the driver on CPU; give it an actor (cluster.num_learners: 1) for a GPU")
    return problems


def placement_problems(cc: Any, env_cfgs: Any) -> list[str]:
    """What ``cluster.placement: manual`` lacks: the bundles, and a valid bundle index for the learner and each env.

    Also called by the placement plan, for env configs given to the builders without a ``MainConfig``.
    """
    if cc.placement != "manual":
        return []
    problems = []
    if not cc.bundles:
        problems.append("cluster.bundles: placement 'manual' needs a list of bundles, e.g. [{CPU: 2}, {CPU: 1}]")
    n = len(cc.bundles)
    if cc.learner_bundle is None or not 0 <= cc.learner_bundle < max(n, 1):
        problems.append(f"cluster.learner_bundle: placement 'manual' needs the learner's bundle index "
                        f"(0..{max(n - 1, 0)}), got {cc.learner_bundle!r}")
    for i, e in enumerate(env_cfgs):
        if e.bundle is None or not 0 <= e.bundle < max(n, 1):
            problems.append(f"env[{i}].bundle: placement 'manual' needs a bundle index (0..{max(n - 1, 0)}), "
                            f"got {e.bundle!r}")
    return problems
