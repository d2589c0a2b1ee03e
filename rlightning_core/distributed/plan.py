"""The ray-mode part of a run's plan: how weights reach the rollout copies, and the lines that describe it.

:func:`weight_sync_plan` is the one place that decides the weight sync: the Ray execution takes its
:class:`SyncPlan` at start-up and acts on it, and ``train --dry-run`` and the run's start-up log print it
through :func:`describe_ray_plan`. It reads the config only, plus one fact of the built policy where the choice
depends on it (:func:`needs_weights_size`): the size of its weights. No ray, no torch.
"""

from __future__ import annotations

from typing import Any

import attrs

from rlightning_core.distributed.ray_common import REPLY_SYNC_MAX_BYTES as INLINE_MAX_BYTES
from rlightning_core.errors import ConfigError

__all__ = ["ASYNC_ENGINES", "INLINE_MAX_BYTES", "SyncPlan", "describe_ray_plan", "needs_weights_size",
           "weight_sync_plan"]

#: ``engine.type`` values naming the asynchronous engine (it publishes weights through the object store).
ASYNC_ENGINES = ("async", "rlightning:async")


@attrs.define(frozen=True, kw_only=True)
class SyncPlan:
    """How the learner's weights reach the rollout copies: *when and to whom* (scheme) over *how* (transport).

    Schemes: ``queued`` (each sync is sent ahead of every runner's next collect; the driver does not wait for
    it), ``blocking`` (every sync waits until every copy has loaded it), ``staged`` (received while acting,
    swapped in between two steps), ``publish`` (the async engine: every ``sync_every`` learner updates, queued
    behind each runner's current chunk). Transports: ``inline`` (numpy weights with the learn reply or the collect
    call), ``object_store`` (one ``ray.put``), ``broadcast`` (a torch.distributed group), ``double_buffer``,
    ``node_shared`` (one shared-memory copy per node), ``undecided`` (``auto``, before the size is known).
    """

    scheme: str
    transport: str
    backend: str | None = None
    """Collective backend (``gloo``, ``nccl``, or ``auto`` when the members' devices decide at start-up)."""
    weights_nbytes: int | None = None
    """Size of the weights, where the choice depended on it (else ``None``)."""

    @property
    def strategy(self) -> str:
        """The execution's mechanism for :attr:`transport` (inline weights are numpy, like the object store's)."""
        if self.transport == "undecided":
            raise ValueError("the weight sync is undecided until the weights' size is known")
        return "object_store" if self.transport == "inline" else self.transport


def needs_weights_size(config: Any) -> bool:
    """Whether :func:`weight_sync_plan` needs the size of the policy's weights to decide.

    ``weight_sync: auto`` with rollout copies in the env runners, CPU learners and an engine that syncs through
    :meth:`sync` (not the async engine): small weights ride inline, big ones are broadcast (or, with the learner
    in the driver, go through the object store).
    """
    c = config.cluster
    return (c.weight_sync == "auto" and c.topology == "env_runner" and not c.learner_num_gpus
            and config.engine.type not in ASYNC_ENGINES)


def weight_sync_plan(config: Any, *, weights_nbytes: int | None = None) -> SyncPlan:
    """The weight sync of a ray-mode run of ``config``.

    Args:
        config: the run's config.
        weights_nbytes: bytes of the weights a sync sends (the tensors of the policy's rollout modules), when
            :func:`needs_weights_size` says the choice depends on them; ``None`` leaves it ``undecided``.

    Raises:
        ConfigError: ``weight_sync: local`` (one process only).
    """
    c = config.cluster
    if c.weight_sync == "local":
        raise ConfigError(["cluster.weight_sync: 'local' copies weights inside one process; in ray mode use "
                           "'broadcast' or 'object_store'"])
    gpus = c.learner_num_gpus > 0 or c.inference_server_num_gpus > 0
    backend = c.backend if c.backend != "auto" else ("auto" if gpus else "gloo")
    blocking = c.topology == "inference_server"
    size = weights_nbytes if needs_weights_size(config) else None
    if config.engine.type in ASYNC_ENGINES:
        return SyncPlan(scheme="publish", transport="object_store")
    if needs_weights_size(config):
        if size is None:
            return SyncPlan(scheme="queued", transport="undecided", backend=None if c.num_learners == 0 else backend)
        small = 0 < size <= INLINE_MAX_BYTES
        if small:
            return SyncPlan(scheme="queued", transport="inline", weights_nbytes=size)
        if c.num_learners == 0:
            return SyncPlan(scheme="queued", transport="object_store", weights_nbytes=size)
        return SyncPlan(scheme="queued", transport="broadcast", backend=backend, weights_nbytes=size)
    transport = "broadcast" if c.weight_sync == "auto" else c.weight_sync
    if c.num_learners == 0:
        transport = "object_store"  # check_in_process allows auto or object_store only
    if transport == "double_buffer":
        return SyncPlan(scheme="staged", transport=transport, backend=backend)
    scheme = "blocking" if blocking or transport == "node_shared" else "queued"
    return SyncPlan(scheme=scheme, transport=transport,
                    backend=backend if transport in ("broadcast", "double_buffer") else None)


def _size(nbytes: int) -> str:
    if nbytes < (1 << 20):
        return f"{nbytes / 1024:.0f} KiB"
    return f"{nbytes >> 20} MiB" if nbytes % (1 << 20) == 0 else f"{nbytes / (1 << 20):.1f} MiB"


def _backend_words(backend: str | None) -> str:
    if backend == "auto":
        return "nccl if every rank has a GPU of its own, else gloo (checked at start-up)"
    return str(backend)


def _sync_line(config: Any, plan: SyncPlan, holders: str) -> str:
    """``weight sync: ...``: the transport, then where the weights go and when."""
    c = config.cluster
    in_driver = c.num_learners == 0
    size = _size(plan.weights_nbytes) if plan.weights_nbytes is not None else ""
    backend = _backend_words(plan.backend)
    if plan.scheme == "publish":
        unused = (f"; cluster.weight_sync: {c.weight_sync} does not apply to this engine"
                  if c.weight_sync not in ("auto", "object_store") else "")
        return (f"weight sync: object_store, published every {config.engine.params.sync_every} learner update(s) "
                f"(one ray.put per publication) to {holders}, queued behind each one's current chunk{unused}")
    if plan.transport == "undecided":
        small = ("numpy weights ride each env runner's next collect call" if in_driver
                 else "numpy weights ride the learn reply to each env runner, ahead of its next collect")
        big = "one ray.put per sync" if in_driver else f"broadcast over {backend}, learner rank 0 -> {holders}"
        return (f"weight sync: auto, decided at start-up from the size of the policy's weights: up to "
                f"{_size(INLINE_MAX_BYTES)} inline ({small}), else {big}")
    if plan.transport == "inline":
        where = ("the learner in the driver sends its numpy weights with each env runner's next collect call"
                 if in_driver else f"the learner's numpy weights ride its learn reply to {holders}, ahead of each "
                                   "one's next collect (no process group)")
        return f"weight sync: inline ({size} of weights, at most {_size(INLINE_MAX_BYTES)}): {where}"
    auto = f" (weight_sync: auto: {size} of weights, over {_size(INLINE_MAX_BYTES)})" if size else ""
    if plan.transport == "object_store":
        source = " from the learner in the driver" if in_driver else ""
        when = (", each copy loading it before it acts again" if plan.scheme == "blocking"
                else ", read by each env runner before its next collect")
        return f"weight sync: object_store{source}{auto}: one ray.put per sync{when}"
    if plan.transport == "broadcast":
        when = "; every sync waits for every copy" if plan.scheme == "blocking" else ""
        return f"weight sync: broadcast over {backend}, learner rank 0 -> {holders}{auto}{when}"
    if plan.transport == "double_buffer":
        return (f"weight sync: double_buffer over {backend} into staging buffers of {holders}, swapped in between "
                "two steps")
    return f"weight sync: node_shared: one /dev/shm copy per node, loaded by {holders}; every sync waits for them"


def describe_ray_plan(config: Any, labels: list[str], sync: SyncPlan | None = None) -> list[str]:
    """Human-readable lines for the ray-mode parts of ``config`` (``labels``: one per env worker).

    ``sync``: the run's weight sync (the execution's, or :func:`weight_sync_plan` with the weights' size);
    ``None`` computes it without the size.
    """
    c = config.cluster
    if sync is None:
        sync = weight_sync_plan(config)
    gpus = c.learner_num_gpus > 0 or c.inference_server_num_gpus > 0
    backend = _backend_words(c.backend if c.backend != "auto" else ("auto" if gpus else "gloo"))
    lines = []
    if c.topology == "inference_server":
        from rlightning_core.distributed.inference_routes import route

        routes = route(len(labels), max(c.num_inference_servers, 1))
        lines.append(f"topology: inference_server, {c.num_inference_servers} inference server(s) "
                     f"({c.inference_server_num_cpus} CPU, {c.inference_server_num_gpus} GPU each) batching the env "
                     "workers' observations every step")
        for j in range(max(c.num_inference_servers, 1)):
            halves = [[f"{labels[i]}#{i}" for i, (s, h) in enumerate(routes) if s == j and h == half]
                      for half in (0, 1)]
            lines.append(f"  rollout actor {j}: half A {', '.join(halves[0]) or '-'}; half B "
                         f"{', '.join(halves[1]) or '-'} (pipelined)")
        holders = f"{c.num_inference_servers} inference server(s)"
    else:
        lines.append("topology: env_runner (each env worker holds a rollout copy and returns whole chunks)")
        holders = f"{len(labels)} env-runner(s)"
    if c.num_learners > 1:
        lines.append(f"learners: {c.num_learners} data-parallel ranks over {backend} (gradients averaged after "
                     "every backward pass; each rank stores an equal slice of every chunk's envs); rank 0 syncs "
                     "weights and is checkpointed")
    lines.append(_sync_line(config, sync, holders))
    if c.topology == "inference_server":
        lines.append("act calls (one per env step): Ray calls to the env worker's rollout actor")
    learner = "the learner in the driver" if c.num_learners == 0 else "the learner actor(s)"
    lines.append(f"collect calls: Ray calls; the chunks go to {learner} as object refs")
    if c.sharded_buffer:
        lines.append("buffer: sharded, one shard in each env-runner actor (on-policy: gathered before learning; "
                     "off-policy: sampled in proportion to shard sizes)")
    if c.offload:
        lines.append("offload: the learner's idle model and optimizer state leave the GPU between learning phases "
                     "(no-op on CPU)")
    return lines
