"""What ``train --dry-run`` prints about a ray-mode run beyond placement: topology, learners, weight sync, buffer.

Pure config reading (no ray, no torch): the dry run stays fast.
"""

from __future__ import annotations

from typing import Any

__all__ = ["describe_ray_plan"]


def describe_ray_plan(config: Any, labels: list[str]) -> list[str]:
    """Human-readable lines for the ray-mode parts of ``config`` (``labels``: one per env worker)."""
    from rlightning_core.distributed.early_start import early_rollout_possible
    from rlightning_core.distributed.ray_common import SYNC_ENGINES, learner_line_possible

    c = config.cluster
    gpus = c.learner_num_gpus > 0 or c.rollout_num_gpus > 0
    backend = c.backend if c.backend != "auto" else (
        "nccl if every rank has a GPU of its own, else gloo (checked at start-up)" if gpus else "gloo")
    sync = "broadcast" if c.weight_sync == "auto" else c.weight_sync
    lines = []
    if c.topology == "inference_server":
        from rlightning_core.distributed.inference_routes import route

        routes = route(len(labels), max(c.eval_workers, 1))
        lines.append(f"topology: inference_server, {c.eval_workers} rollout actor(s) ({c.rollout_num_cpus} CPU, "
                     f"{c.rollout_num_gpus} GPU each) batching the env workers' observations every step")
        for j in range(max(c.eval_workers, 1)):
            halves = [[f"{labels[i]}#{i}" for i, (s, h) in enumerate(routes) if s == j and h == half]
                      for half in (0, 1)]
            lines.append(f"  rollout actor {j}: half A {', '.join(halves[0]) or '-'}; half B "
                         f"{', '.join(halves[1]) or '-'} (pipelined)")
        holders = f"{c.eval_workers} rollout actor(s)"
    else:
        lines.append("topology: env_runner (each env worker holds a rollout copy and returns whole chunks)")
        holders = f"{len(labels)} env-runner(s)"
    if c.train_workers > 1:
        lines.append(f"learners: {c.train_workers} data-parallel ranks over {backend} (gradients averaged after "
                     "every backward pass; each rank stores an equal slice of every chunk's envs); rank 0 syncs "
                     "weights and is checkpointed")
    detail = {
        "broadcast": f" over {backend}, learner rank 0 -> {holders}",
        "object_store": " (one ray.put per sync)",
        "double_buffer": f" over {backend} into staging buffers of {holders}, swapped between two steps",
        "node_shared": f": one /dev/shm copy per node, loaded by {holders}",
    }.get(sync, "")
    if c.train_workers == 0:  # the learner is the driver: weights leave it as numpy arrays
        sync, detail = "object_store", (" from the learner in the driver: numpy weights ride each env runner's "
                                        "next collect call (one ray.put per sync above 1 MiB)")
    lines.append(f"weight sync: {sync}{detail}")
    if c.topology == "inference_server":
        lines.append("act calls (one per env step): " + (
            "over each rollout actor's Unix socket from the env workers on its node, Ray calls from any other "
            "(cluster.local_channel)" if c.local_channel else "Ray calls (cluster.local_channel: false)"))
    if c.train_workers == 0:
        lines.append("collect calls: " + ("over a Unix socket to the env runners on the driver's node, Ray calls to "
                                          "any other (cluster.local_channel)" if c.local_channel else
                                          "Ray calls (cluster.local_channel: false)"))
    elif learner_line_possible(c) and config.engine.type in SYNC_ENGINES:
        lines.append("collect calls: the learner actor asks the env runners on its node over a Unix socket and "
                     "learns in the same call, one Ray call per iteration from the driver (cluster.local_channel; "
                     "when every runner is on the learner's node and the weights are at most 1 MiB; else Ray calls)")
    else:
        lines.append("collect calls: Ray calls")
    if early_rollout_possible(config):
        lines.append("first rollout: with initial weights a helper process builds while Ray starts; the learner "
                     "actor starts after the env actors and adopts them (cluster.early_rollout; when Ray is started "
                     "or joined by this run and the weights are at most 1 MiB)")
    if c.sharded_buffer:
        lines.append("buffer: sharded, one shard in each env-runner actor (on-policy: gathered before learning; "
                     "off-policy: sampled in proportion to shard sizes)")
    if c.offload:
        lines.append("offload: the learner's idle model and optimizer state leave the GPU between learning phases "
                     "(no-op on CPU)")
    return lines
