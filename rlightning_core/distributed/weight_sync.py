"""The weight sync of a Ray run: one object, chosen once at start-up from the run's :class:`~.plan.SyncPlan`.

The plan's *scheme* says when the driver waits (``queued``: a sync is sent ahead of each runner's next collect
and the driver does not wait; ``blocking``; ``staged``: swapped in between two steps; ``publish``: the async
engine's publications). Its *transport* says how the weights travel, one small class each: :class:`ObjectStore`
(one ``ray.put``), :class:`Inline` (numpy weights with the learn reply or the next collect call),
:class:`Broadcast` (a torch.distributed group, gloo or nccl), :class:`DoubleBuffer` (a broadcast into staging
buffers) and :class:`NodeShared` (one shared-memory copy per node).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from rlightning_core.distributed.plan import SyncPlan
from rlightning_core.distributed.ray_common import WorkerFailure, collective_backend, get, pack_weights
from rlightning_core.distributed.weight_check import WeightCheck

__all__ = ["Broadcast", "DoubleBuffer", "Inline", "NodeShared", "ObjectStore", "WeightSync", "group_backend"]

log = logging.getLogger("rlightning")


def group_backend(ray: Any, config: Any, override: str, members: Sequence[Any]) -> str:
    """The torch.distributed backend of a group of ``members``.

    ``cluster.backend`` (or the ``build_policy_group(backend=...)`` ``override``), else
    :func:`collective_backend` from where each member's weights live: nccl only when every member has a GPU of
    its own.
    """
    cc = config.cluster
    requested = override if override != "auto" else cc.backend
    if requested != "auto":
        return requested
    if not cc.learner_num_gpus and not cc.inference_server_num_gpus:
        return "gloo"  # no GPU anywhere: no need to ask the members
    devices = [str(d) for d in get(ray, [m.sync_device.remote() for m in members], cc.call_timeout_s,
                                   "locate the weights' devices")]
    backend, why = collective_backend("auto", devices)
    log.info("weight-sync group of %d ranks: %s (%s)", len(devices), backend, why)
    return backend


class ObjectStore:
    """One ``ray.put`` of the learner's weights per sync, read by every rollout copy."""

    def __init__(self, ws: WeightSync) -> None:
        self.ws = ws

    def start(self) -> None:
        """Nothing to set up."""

    def send(self, version: int, *, blocking: bool) -> dict[str, float]:
        """Send the learner's weights as ``version``; queued unless ``blocking`` or the scheme waits."""
        ws = self.ws
        ref, fp_ref = ws.learner.weights_and_fingerprint.options(num_returns=2).remote()
        ws.check.expect(version, fp_ref)
        refs = [a.set_weights.remote(ref, version) for a in ws.copies()]
        if ws.may_queue(blocking):
            ws.queue(refs)
        else:
            ws.get(refs, "send weights through the object store")
        return {}

    def resync(self, indices: list[int], version: int) -> None:
        """The learner's weights now (an async learner may have moved past ``version``) to recreated copies."""
        ws = self.ws
        copies = ws.copies()
        ref = ws.learner.get_weights.remote()
        if not ws.servers:  # an env runner's report of this version holds those weights, not version's
            for i in indices:
                ws.check.exempt[i] = version
        ws.get([copies[i].set_weights.remote(ref, version) for i in indices], "re-sync the recreated copies")

    def close(self) -> None:
        """Nothing to release."""


class Inline(ObjectStore):
    """Small numpy weights ride the learn reply (learner actors) or the next collect call (learner in driver).

    The weights of the last learn (:attr:`WeightSync.fresh`) are queued ahead of each runner's next collect: no
    collective that needs the learner and every runner at once, no extra round trip. Blocking syncs (the first,
    re-syncs after restarts and resumes) go through the object store.
    """

    def send(self, version: int, *, blocking: bool) -> dict[str, float]:
        """Queue the weights the last learn returned; without them, the object store."""
        ws = self.ws
        fresh, ws.fresh = ws.fresh, None
        if fresh is None or not ws.may_queue(blocking):
            return super().send(version, blocking=blocking)
        weights, fp = fresh
        ws.check.expect(version, fp)
        if ws.in_driver:  # numpy values here: they go with each runner's next collect call
            ws.ride = (pack_weights(weights), version)
        else:
            ws.queue([a.set_weights.remote(weights, version) for a in ws.copies()])
        return {"sync/bytes": ws.nbytes}


class Broadcast:
    """A torch.distributed group of learner rank 0 and every rollout copy; rank 0 broadcasts bucketed weights."""

    def __init__(self, ws: WeightSync) -> None:
        self.ws = ws
        self.info: dict[str, float] = {"bytes": ws.nbytes}  # the layout does not change between syncs

    def start(self) -> None:
        """Form the group."""
        self.form()

    def form(self) -> None:
        """(Re)form the group: learner rank 0, rollout copies 1..K; every member is idle here."""
        ws = self.ws
        cc = ws.config.cluster
        members = [ws.learner, *ws.copies()]
        backend = group_backend(ws.ray, ws.config, ws.backend_override, members)
        addr, port = ws.get(ws.learner.free_port.remote(), "pick a rendezvous port")
        bucket = int(cc.bucket_mb * (1 << 20))
        # the rendezvous is bounded like a transfer, in the driver and in each member's store alike
        refs = [m.init_collective.remote(addr, port, rank, len(members), backend, bucket, cc.call_timeout_s)
                for rank, m in enumerate(members)]
        _, pending = ws.ray.wait(refs, num_returns=len(refs), timeout=cc.call_timeout_s)
        if pending:
            missing = [ws.member_name(refs.index(r)) for r in pending]
            raise WorkerFailure(f"the weight-sync group ({backend}, rendezvous at {addr}:{port}) did not form within "
                                f"cluster.call_timeout_s={cc.call_timeout_s:g}s: {', '.join(missing)} did not join")
        sigs = []
        for rank, ref in enumerate(refs):
            try:
                sigs.append(ws.ray.get(ref))
            except ws.ray.exceptions.RayActorError as exc:
                raise WorkerFailure(f"{ws.member_name(rank)} died while the weight-sync group formed: {exc}") \
                    from exc
        if len(set(sigs)) != 1:
            raise WorkerFailure(f"learner and rollout copies disagree on the weight layout ({sigs}); the same "
                                "policy class and spaces must be used everywhere")

    def send(self, version: int, *, blocking: bool) -> dict[str, float]:
        """Broadcast ``version`` from rank 0; queued unless ``blocking`` or the scheme waits."""
        ws = self.ws
        refs = [m.broadcast_weights.remote(version) for m in [ws.learner, *ws.copies()]]
        ws.check.expect(version, refs[0], "fingerprint")
        if ws.may_queue(blocking):
            ws.queue(refs)
        else:
            self.info = ws.get(refs, "broadcast weights")[0]
        return {"sync/bytes": self.info.get("bytes", 0.0), "sync/buckets": self.info.get("buckets", 0.0)}

    def resync(self, indices: list[int], version: int) -> None:
        """One re-formed group for every recreated copy, then a blocking broadcast."""
        ws = self.ws
        for m in [ws.learner, *[a for j, a in enumerate(ws.copies()) if j not in indices]]:
            m.leave_collective.remote()
        self.form()
        self.send(version, blocking=True)

    def close(self) -> None:
        """Nothing to release (the actors' groups go with them)."""


class DoubleBuffer(Broadcast):
    """Rank 0 broadcasts into every copy's staging buckets while it acts; it swaps them in between two steps.

    A non-blocking sync returns at once; the next one first waits for this transfer (transfers never overlap).
    """

    def __init__(self, ws: WeightSync) -> None:
        super().__init__(ws)
        self.staging: list[Any] = []

    def start(self) -> None:
        """Form the group and allocate every copy's staging buffers."""
        self.form()
        self.enable(self.ws.copies())

    def enable(self, actors: list[Any]) -> None:
        """Allocate the staging buffers of ``actors``."""
        bucket = int(self.ws.config.cluster.bucket_mb * (1 << 20))
        self.ws.get([a.enable_double_buffer.remote(bucket) for a in actors], "allocate the staging buffers")

    def drain(self, ignore_errors: bool = False) -> list[dict[str, float]]:
        """Wait for the transfer started by the previous sync."""
        refs, self.staging = self.staging, []
        if not refs:
            return []
        try:
            return list(self.ws.ray.get(refs, timeout=self.ws.config.cluster.call_timeout_s))
        except Exception:
            if not ignore_errors:
                raise
            return []

    def send(self, version: int, *, blocking: bool) -> dict[str, float]:
        """Start staging ``version`` (``blocking``: wait for it and swap it in)."""
        ws = self.ws
        done = self.drain()
        copies = ws.copies()
        refs = [ws.learner.broadcast_weights.remote(version)] + [
            a.stage_weights.options(concurrency_group="weights").remote(version) for a in copies]
        ws.check.expect(version, refs[0], "fingerprint")  # the learner's result holds it
        if blocking:
            done = ws.get(refs, "broadcast weights")
            ws.get([a.apply_staged.remote() for a in copies], "swap in the staged weights")
        else:
            self.staging = refs
        if not done:
            return {}
        return {"sync/bytes": done[0]["bytes"], "sync/buckets": done[0]["buckets"],
                "sync/transfer_s": max(float(i["seconds"]) for i in done)}

    def resync(self, indices: list[int], version: int) -> None:
        """Re-form the group, allocate the recreated copies' buffers, stage ``version`` and wait for it."""
        self.drain(ignore_errors=True)  # a transfer a dead worker was part of failed or hangs
        ws = self.ws
        for m in [ws.learner, *[a for j, a in enumerate(ws.copies()) if j not in indices]]:
            m.leave_collective.remote()
        self.form()
        copies = ws.copies()
        self.enable([copies[i] for i in indices])
        self.send(version, blocking=True)

    def close(self) -> None:
        """Wait out a transfer in flight."""
        self.drain(ignore_errors=True)


class NodeShared:
    """One pair of shared-memory weight slots per node; each node's writer fills them, every copy loads them.

    The learner writes the slots of its own node; on every other node one copy (the node's first) fetches the
    weights once through the object store and writes them, so the network carries one copy per node.
    """

    def __init__(self, ws: WeightSync) -> None:
        self.ws = ws
        self.token = uuid.uuid4().hex[:12]
        self.learner_writes = False
        self.leaders: list[Any] = []
        self.nodes = 0

    def start(self) -> None:
        """Map the slots on every node and pick each node's writer."""
        ws = self.ws
        bucket = int(ws.config.cluster.bucket_mb * (1 << 20))
        copies = ws.copies()
        nodes = ws.get([m.node_id.remote() for m in [ws.learner, *copies]], "locate the workers' nodes")
        learner_node, copy_nodes = nodes[0], nodes[1:]
        self.learner_writes = learner_node in copy_nodes
        self.leaders = []
        seen = {learner_node} if self.learner_writes else set()
        for actor, node in zip(copies, copy_nodes, strict=True):
            if node not in seen:
                seen.add(node)
                self.leaders.append(actor)
        members = ([ws.learner] if self.learner_writes else []) + list(copies)
        ws.get([m.shm_attach.remote(self.token, bucket) for m in members], "map the node-shared weight slots")
        self.nodes = len(seen)

    def send(self, version: int, *, blocking: bool) -> dict[str, float]:
        """Write ``version`` into every node's slots, then every copy loads it (always blocking)."""
        ws = self.ws
        t0 = time.perf_counter()
        writes = [ws.learner.shm_write.remote(version)] if self.learner_writes else []
        if self.leaders:
            ref = ws.learner.get_weights.remote()
            writes += [leader.shm_write_from.remote(ref, version) for leader in self.leaders]
        ws.check.expect(version, ws.learner.weight_fingerprint.remote())
        ws.get(writes, "write the node-shared weights")
        t1 = time.perf_counter()
        pauses = ws.get([a.shm_read.remote(version) for a in ws.copies()], "load the node-shared weights")
        return {"sync/write_s": t1 - t0, "sync/rollout_pause_s": max(pauses, default=0.0),
                "sync/node_copies": float(self.nodes)}

    def resync(self, indices: list[int], version: int) -> None:
        """Map the slots again (new copies, perhaps new nodes) and load ``version`` everywhere."""
        self.start()
        self.send(version, blocking=True)

    def close(self) -> None:
        """Remove this run's shared-memory files (their writers unlink them)."""
        ws = self.ws
        with contextlib.suppress(Exception):
            ws.ray.get([m.shm_detach.remote(True) for m in [ws.learner, *ws.copies()]],
                       timeout=ws.config.cluster.close_timeout_s)


TRANSPORTS = {"object_store": ObjectStore, "inline": Inline, "broadcast": Broadcast, "double_buffer": DoubleBuffer,
              "node_shared": NodeShared}


class WeightSync:
    """The learner's weights to every rollout copy, by the run's :class:`~.plan.SyncPlan`; checked after.

    Args:
        ray: the ``ray`` module.
        config: the run's config.
        plan: the decided plan (:func:`~.plan.weight_sync_plan` with the weights' size).
        learner: rank 0's handle, the source of every sync.
        copies: the actors holding rollout copies now (env runners or inference servers; they change on restarts).
        member_name: how messages name rollout copy ``i``.
        runner_name: how fingerprint mismatches name env runner ``i``.
        in_driver: the learner lives in the driver (``cluster.num_learners: 0``).
        servers: the copies are inference servers (their syncs are blocking and checked right after).
        backend_override: ``build_policy_group(backend=...)``; ``auto`` defers to ``cluster.backend``.
        nbytes: the weights' size, where it was measured (for the metrics of queued syncs).
    """

    def __init__(self, ray: Any, config: Any, plan: SyncPlan, *, learner: Any, copies: Callable[[], list[Any]],
                 member_name: Callable[[int], str], runner_name: Callable[[int], str], in_driver: bool,
                 servers: bool, backend_override: str = "auto", nbytes: float = 0.0) -> None:
        self.ray, self.config, self.plan, self.learner = ray, config, plan, learner
        self.copies = copies
        self.in_driver, self.servers, self.backend_override, self.nbytes = in_driver, servers, backend_override, nbytes
        self._member_name = member_name
        self.version = 0
        self.check = WeightCheck(ray, config.cluster.call_timeout_s, runner_name, plan.transport)
        self.fresh: tuple[Any, Any] | None = None  # rank 0's weights (and fingerprint) from the last learn reply
        self.ride: tuple[Any, int] | None = None  # packed weights of an in-driver learner for the next collect
        self._queued: list[Any] = []  # a transfer sent ahead of the runners' next collect
        self._publishes: list[Any] = []
        self.transport = TRANSPORTS[plan.transport](self)
        log.info("weight sync: %s over %s%s", plan.scheme, plan.transport,
                 f" ({plan.backend})" if plan.backend else "")

    @property
    def rides_reply(self) -> bool:
        """Whether the next learn should return rank 0's weights (:class:`Inline`)."""
        return isinstance(self.transport, Inline)

    def get(self, refs: Any, what: str) -> Any:
        """``ray.get`` within ``cluster.call_timeout_s``; a timeout is a :class:`WorkerFailure` saying ``what``."""
        return get(self.ray, refs, self.config.cluster.call_timeout_s, what)

    def member_name(self, rank: int) -> str:
        """Who rank ``rank`` of the weight-sync group is: the learner or a rollout copy."""
        return "the learner" if rank == 0 else self._member_name(rank - 1)

    def may_queue(self, blocking: bool) -> bool:
        """Whether a sync may return before its transfer ends.

        Each env runner runs its calls in order on one thread, so a transfer sent just before its next collect
        completes before that collect starts: the driver does not wait (it checks the result with the chunks).
        Not for the first sync, re-syncs after restarts or resumes (``blocking``), nor schemes that wait.
        """
        return not blocking and self.plan.scheme == "queued"

    def queue(self, refs: list[Any]) -> None:
        """Refs of a transfer :meth:`finish` waits for."""
        self._queued += refs

    def start(self) -> None:
        """Set the transport up (form its group, map its memory)."""
        self.transport.start()

    def sync(self, *, blocking: bool = False) -> tuple[int, dict[str, float]]:
        """Bump the version and send the learner's weights to every rollout copy."""
        self.version += 1
        self.ride = None  # a newer set supersedes weights still waiting for a collect
        metrics = self.transport.send(self.version, blocking=blocking)
        self.fresh = None
        if self.servers:  # their syncs are blocking: every server holds this version now
            self.check.check_servers(self.copies())
        return self.version, metrics

    def publish(self) -> int:
        """The async engine's publication: the object store, queued behind each copy's current chunk.

        Neither the learner nor the runners wait, whatever the transport; errors of earlier publications
        surface here. Returns the new version.
        """
        pending = self._publishes
        if pending:
            done, pending = self.ray.wait(pending, num_returns=len(pending), timeout=0)
            self.ray.get(done)
        self.version += 1
        ref, fp_ref = self.learner.weights_and_fingerprint.options(num_returns=2).remote()
        self.check.expect(self.version, fp_ref)  # each runner reports what it loaded with its next chunk
        self._publishes = pending + [a.set_weights.remote(ref, self.version) for a in self.copies()]
        return self.version

    def take_ride(self) -> tuple[Any, ...]:
        """The extra arguments of the next collect call: the packed weights an in-driver learner left, if any."""
        ride, self.ride = self.ride, None
        return ride or ()

    def send_ride(self) -> None:
        """Weights left to ride the next collect go out now, as one ``ray.put`` (the streaming calls)."""
        ride, self.ride = self.ride, None
        if ride is not None:
            from rlightning_core.distributed.ray_common import unpack_weights

            ref = self.ray.put(unpack_weights(ride[0]))
            for a in self.copies():
                a.set_weights.remote(ref, ride[1])

    def finish(self, *, ignore_errors: bool = False) -> None:
        """Wait for a transfer :meth:`sync` queued (raising its error unless ``ignore_errors``)."""
        refs, self._queued = self._queued, []
        if not refs:
            return
        try:
            self.get(refs, "send weights")
        except Exception:
            if not ignore_errors:
                raise

    def resync(self, indices: list[int]) -> None:
        """Give the recreated rollout copies ``indices`` the current version."""
        self.finish(ignore_errors=True)  # a queued transfer a dead worker was part of failed or hangs
        self.transport.resync(sorted(indices), self.version)

    def close(self) -> None:
        """Release the transport's resources; wait out transfers in flight."""
        self.transport.close()
        self.finish(ignore_errors=True)
