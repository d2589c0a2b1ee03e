"""Streaming calls of the Ray execution for the async engine: launch without waiting, finish when ready."""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

from rlightning_core.distributed.ray_common import WorkerFailure
from rlightning_core.env.runner import EnvStepError, RolloutStats

__all__ = ["StreamingCalls"]


class StreamingCalls:
    """The streaming half of :class:`~rlightning_core.distributed.execution.RayExecution` (its only base)."""

    config: Any
    ray: Any
    env_group: Any
    weight_sync: Any
    learner_group: Any
    restarts: int
    _in_flight: dict[int, list[int]]
    _pending_chunks: list[Any]

    if TYPE_CHECKING:
        def _restart_runner(self, index: int, exc: BaseException) -> Any: ...

        def _merge_preprocessors(self, stats: list[Any]) -> None: ...

        def _push_preprocessors(self) -> None: ...

    @property
    def num_runners(self) -> int:
        """Env-runner actors, one per env worker."""
        return len(self.env_group.actors)

    def steps_per_collect(self, num_steps: int) -> int:
        """Env steps one :meth:`collect` of ``num_steps`` adds (every runner steps each of its envs)."""
        return num_steps * self.env_group.total_envs

    def collect_chunks(self, num_steps: int) -> list[tuple[Any, RolloutStats]]:
        """Every runner collects a chunk in parallel; returns ``(chunk_ref, stats)`` per runner that did not fail.

        The chunks stay in the object store until :meth:`add_chunks` hands them to the learner's next learn.
        """
        launched = [self.start_collect(i, num_steps) for i in range(self.num_runners)]
        out = []
        for i, (chunk, stats_ref) in enumerate(launched):
            stats = self.finish_collect(i, stats_ref)
            if stats is not None:
                out.append((chunk, stats))
        self.weight_sync.finish()  # weights a sync queued ran before these chunks on every runner
        return out

    def add_chunks(self, chunks: Sequence[Any]) -> None:
        """Chunks (refs from :meth:`collect_chunks`) for the learner: it stores them when the next learn starts."""
        self._pending_chunks = [*self._pending_chunks, *chunks]

    def buffer_size(self) -> int:
        """Transitions the learner's (rank 0's) buffer holds."""
        return int(self.learner_group.get(self.learner_group.learner.buffer_size.remote(), "query the buffer"))

    def wait(self, handles: Sequence[Hashable], timeout: float) -> list[Hashable]:
        """``ray.wait`` for the first of ``handles`` (object refs), then every one finished by then.

        Raises:
            WorkerFailure: none finished within ``timeout`` seconds.
        """
        done, _ = self.ray.wait(list(handles), num_returns=1, timeout=timeout)
        if not done:
            raise WorkerFailure(f"no chunk or learn result arrived within {timeout:.0f}s (cluster.call_timeout_s)")
        done, _ = self.ray.wait(list(handles), num_returns=len(handles), timeout=0)
        return list(done)

    # -- streaming (the async engine): launch without waiting, finish when ready ----------------------------
    def start_collect(self, index: int, num_steps: int) -> tuple[Any, Any]:
        """Launch one chunk on env runner ``index`` without waiting; returns ``(chunk_ref, stats_ref)``."""
        self.weight_sync.send_ride()  # weights a sync left to ride the next collect, ordered before this chunk
        refs = self.env_group.actors[index].collect.options(num_returns=2).remote(num_steps)
        self._in_flight.setdefault(index, []).append(num_steps)  # a checkpoint's state call waits behind it
        return refs[0], refs[1]

    def finish_collect(self, index: int, stats_ref: Any) -> RolloutStats | None:
        """The stats of a finished chunk (preprocessor statistics merged); ``None`` if runner ``index`` died.

        A dead runner is recreated (within ``cluster.max_restarts``); the chunks queued on it are lost.
        """
        try:
            stats = self.ray.get(stats_ref, timeout=self.config.cluster.call_timeout_s)
        except (self.ray.exceptions.RayActorError, self.ray.exceptions.GetTimeoutError, EnvStepError) as exc:
            self._restart_runner(index, exc)  # the chunks queued on it are lost with it
            return None
        queued = self._in_flight.get(index)
        if queued:
            queued.pop(0)
        self._merge_preprocessors([stats])
        self.weight_sync.check.check_reports([stats], [index])
        return stats

    def start_learn(self, progress: float, chunks: list[Any], *, version: int, max_staleness: int | None) -> Any:
        """Queue on the learner(s): store ``chunks`` (refs) within the staleness bound, then learn once.

        Returns the ref of rank 0's :meth:`LearnerActor.learn_chunks` result without waiting.
        """
        return self.learner_group.start_learn(progress, chunks, version=version, max_staleness=max_staleness)

    def finish_learn(self, ref: Any) -> dict[str, Any]:
        """The result of a learn call started with :meth:`start_learn`."""
        return self.learner_group.finish_learn(ref)

    def publish_weights(self) -> tuple[int, dict[str, float]]:
        """Send the learner's current weights (and merged preprocessor statistics) to every runner.

        Through the object store, queued behind each runner's current chunk: neither the learner nor the
        runners wait, whatever ``cluster.weight_sync`` says. Bumps :attr:`version`; the next chunk each runner
        starts is collected with these weights. Errors of earlier publishes surface here.
        """
        t0 = time.perf_counter()
        version = self.weight_sync.publish()
        self._push_preprocessors()
        return version, {"sync/seconds": time.perf_counter() - t0, "sync/version": float(version),
                         "fault/worker_restarts": float(self.restarts)}
