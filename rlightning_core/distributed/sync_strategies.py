"""Weight-sync strategies of the Ray execution.

Queued broadcast or object store, weights riding the learn reply, double buffering and the node-local shared
buffer.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from rlightning_core.distributed.ray_common import RayExecutionState, pack_weights, strip_private

__all__ = ["WeightSyncMixin"]


class WeightSyncMixin(RayExecutionState):
    """Mixed into :class:`~rlightning_core.distributed.execution.RayExecution`, whose state it uses."""

    strategy: str
    sync_plan: Any
    inference_server: bool
    _blocking_sync: bool
    _sync_refs: list[Any]
    _sync_info: dict[str, float]
    _staging_refs: list[Any]
    _fresh_weights: Any
    _fresh_fp: Any
    _weights_with_collect: tuple[Any, int] | None
    in_process: bool

    if TYPE_CHECKING:
        @property
        def rollout_actors(self) -> list[Any]: ...  # noqa: D102

        def _get(self, refs: Any, timeout: float, what: str) -> Any: ...

        def _expect(self, version: int, value: Any, key: str | None = None) -> None: ...

        def _check_servers(self) -> None: ...

    # -- weight-sync strategies beyond broadcast / object_store -------------------------------------------
    def _enable_double_buffer(self, actors: list[Any]) -> None:
        bucket = int(self.config.cluster.bucket_mb * (1 << 20))
        self._get([a.enable_double_buffer.remote(bucket) for a in actors], self.config.cluster.call_timeout_s,
                  "allocate the staging buffers")

    def _drain_staging(self, ignore_errors: bool = False) -> list[dict[str, float]]:
        """Wait for the transfer started by the previous double-buffered sync."""
        refs, self._staging_refs = self._staging_refs, []
        if not refs:
            return []
        try:
            return list(self.ray.get(refs, timeout=self.config.cluster.call_timeout_s))
        except Exception:
            if not ignore_errors:
                raise
            return []

    def _stage(self, version: int, *, blocking: bool) -> dict[str, float]:
        """``double_buffer``: rank 0 broadcasts into every runner's staging buckets while the runners act.

        Non-blocking syncs return at once; the runners swap the new weights in between two steps as soon as
        they have all of them. The next sync first waits for this transfer (so transfers never overlap).
        """
        done = self._drain_staging()
        refs = [self.learner.broadcast_weights.remote(version)] + [
            a.stage_weights.options(concurrency_group="weights").remote(version) for a in self.env_group.actors]
        self._expect(version, refs[0], "fingerprint")  # the learner's result holds it
        if blocking:
            info = self._get(refs, self.config.cluster.call_timeout_s, "broadcast weights")
            self._get([a.apply_staged.remote() for a in self.env_group.actors], self.config.cluster.call_timeout_s,
                      "swap in the staged weights")
            return {"sync/bytes": info[0]["bytes"], "sync/buckets": info[0]["buckets"],
                    "sync/transfer_s": max(float(i["seconds"]) for i in info)}
        self._staging_refs = refs
        out: dict[str, float] = {}
        if done:
            out = {"sync/bytes": done[0]["bytes"], "sync/buckets": done[0]["buckets"],
                   "sync/transfer_s": max(float(i["seconds"]) for i in done)}
        return out

    def _setup_shared(self) -> None:
        """``node_shared``: map one pair of shared weight slots per node; pick each node's writer.

        The learner writes the slots of its own node; on every other node one runner (the node's first)
        fetches the weights once through the object store and writes them, so the network carries one copy
        per node. Every runner then loads from its node's slots.
        """
        import uuid

        cc = self.config.cluster
        bucket = int(cc.bucket_mb * (1 << 20))
        self._shm_token = getattr(self, "_shm_token", None) or uuid.uuid4().hex[:12]
        runners = self.rollout_actors
        nodes = self._get([m.node_id.remote() for m in [self.learner, *runners]], cc.call_timeout_s,
                          "locate the workers' nodes")
        learner_node, runner_nodes = nodes[0], nodes[1:]
        self._shm_learner_writes = learner_node in runner_nodes
        self._shm_leaders: list[Any] = []
        seen = {learner_node} if self._shm_learner_writes else set()
        for actor, node in zip(runners, runner_nodes, strict=True):
            if node not in seen:
                seen.add(node)
                self._shm_leaders.append(actor)
        members = ([self.learner] if self._shm_learner_writes else []) + list(runners)
        self._get([m.shm_attach.remote(self._shm_token, bucket) for m in members], cc.call_timeout_s,
                  "map the node-shared weight slots")
        self._shm_nodes = len(seen)

    def _shared_sync(self, version: int) -> dict[str, float]:
        timeout = self.config.cluster.call_timeout_s
        t0 = time.perf_counter()
        writes = [self.learner.shm_write.remote(version)] if self._shm_learner_writes else []
        if self._shm_leaders:
            ref = self.learner.get_weights.remote()
            writes += [leader.shm_write_from.remote(ref, version) for leader in self._shm_leaders]
        self._expect(version, self.learner.weight_fingerprint.remote())
        self._get(writes, timeout, "write the node-shared weights")
        t1 = time.perf_counter()
        pauses = self._get([a.shm_read.remote(version) for a in self.rollout_actors], timeout,
                           "load the node-shared weights")
        return {"sync/write_s": t1 - t0, "sync/rollout_pause_s": max(pauses, default=0.0),
                "sync/node_copies": float(self._shm_nodes)}

    def _reply_sync(self) -> bool:
        """Inline weights (:class:`~rlightning_core.distributed.plan.SyncPlan`): they come back with the learn reply.

        :meth:`sync` then queues them (numpy, copied in bit for bit) ahead of each runner's next collect: no
        collective that needs the learner and every runner scheduled at once, no extra round trip.
        """
        return bool(getattr(self, "_reply_weights", False)) and self._queue_sync()

    def _broadcast(self, version: int) -> dict[str, float]:
        members = [self.learner, *self.rollout_actors]
        results = self._get([m.broadcast_weights.remote(version) for m in members],
                            self.config.cluster.call_timeout_s, "broadcast weights")
        self._sync_info = results[0]
        self._expect(version, results[0].get("fingerprint"))
        return results[0]

    def _queue_sync(self) -> bool:
        """Whether :meth:`sync` may return before the transfer ends.

        Each env runner runs its calls in order on one thread, so a transfer sent just before its next collect
        completes before that collect starts: the driver does not wait for it (one round trip per iteration
        saved; it checks the result together with the chunks). Not for the inference-server topology (its
        rollout actors are threaded) nor for the first sync, re-syncs after a restart or a resume.
        """
        return not self._blocking_sync and self.sync_plan.scheme == "queued"

    def _finish_sync(self, *, ignore_errors: bool = False) -> None:
        """Wait for a transfer :meth:`sync` queued (raising its error unless ``ignore_errors``)."""
        refs, self._sync_refs = getattr(self, "_sync_refs", []), []
        if not refs:
            return
        try:
            self._get(refs, self.config.cluster.call_timeout_s, "send weights")
        except Exception:
            if not ignore_errors:
                raise

    def sync(self) -> tuple[int, dict[str, float]]:
        """Push the learner's weights (and merged preprocessor statistics) to every rollout copy."""
        t0 = time.perf_counter()
        self.version += 1
        self._weights_with_collect = None  # a newer set supersedes weights still waiting for a collect
        queued = self._queue_sync()
        fresh, self._fresh_weights = self._fresh_weights, None
        fresh_fp, self._fresh_fp = self._fresh_fp, None  # their fingerprint, from the learner
        if queued and fresh is not None and self.in_process:
            # the learner is in this process: the weights (numpy values) go with each runner's next collect call
            self._weights_with_collect = (pack_weights(fresh), self.version)
            self._expect(self.version, fresh_fp)
            metrics = {"sync/bytes": self._sync_info.get("bytes", 0.0)}
        elif queued and fresh is not None:  # the weights came with the learn reply (_reply_sync)
            self._sync_refs += [a.set_weights.remote(fresh, self.version) for a in self.rollout_actors]
            self._expect(self.version, fresh_fp)
            metrics = {"sync/bytes": self._sync_info.get("bytes", 0.0)}
        elif self.strategy == "broadcast" and queued:
            refs = [m.broadcast_weights.remote(self.version) for m in [self.learner, *self.rollout_actors]]
            self._sync_refs += refs
            self._expect(self.version, refs[0], "fingerprint")
            info = self._sync_info  # the layout does not change between syncs
            metrics = {"sync/bytes": info.get("bytes", 0.0), "sync/buckets": info.get("buckets", 0.0)}
        elif self.strategy == "broadcast":
            info = self._broadcast(self.version)
            metrics = {"sync/bytes": info["bytes"], "sync/buckets": info["buckets"]}
        elif self.strategy == "double_buffer":
            metrics = self._stage(self.version, blocking=self._blocking_sync)
        elif self.strategy == "node_shared":
            metrics = self._shared_sync(self.version)
        else:  # the object store: one ray.put of the learner's weights, read by every rollout copy
            ref, fp_ref = self.learner.weights_and_fingerprint.options(num_returns=2).remote()
            self._expect(self.version, fp_ref)
            refs = [a.set_weights.remote(ref, self.version) for a in self.rollout_actors]
            if queued:
                self._sync_refs += refs
            else:
                self._get(refs, self.config.cluster.call_timeout_s, "send weights through the object store")
            metrics = {}
        if self.preprocessors:
            states = [strip_private(p.state_dict()) for p in self.preprocessors]
            for a in self.env_group.actors:  # ordered before the next collect on each actor
                a.load_preprocessor_states.remote(states)
        if self.config.cluster.offload:  # the learners are idle until the next learn: free their GPU memory
            for ln in self.learners:
                ln.offload_idle.remote()
        if self.inference_server:  # its syncs are blocking: every rollout actor holds this version now
            self._check_servers()
        metrics["sync/seconds"] = time.perf_counter() - t0
        metrics["sync/version"] = float(self.version)
        metrics["fault/worker_restarts"] = float(getattr(self, "restarts", 0))
        return self.version, metrics
