"""The learner actor's line (``cluster.local_channel`` with one learner actor): it drives each iteration.

With the learner in an actor, a Ray-call iteration has a hop at every step: the collect calls, the chunks
resolving into the learn task, the learn reply, the weights going back out (1-3 ms each on a 2-core machine,
~4 ms of a ~17 ms CartPole iteration). When the weights ride inline (``weight_sync: auto`` with a small CPU
policy, the sync engine, the env-runner topology), the learner actor listens on a Unix socket of its own
(:mod:`rlightning_core.distributed.channel`), the env runners on its node connect to it, and one
``collect_and_learn`` call sends the collect requests (with the last sync's weights), gathers the chunks and
learns. A driver on the learner's node makes that call over a socket too.

:class:`LineHost` is the learner actor's side, :class:`LearnerLineMixin` the driver's
(:class:`~rlightning_core.distributed.execution.RayExecution`).
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

from rlightning_core.distributed.channel import ChannelLost, ChannelTimeout, fault_from_info
from rlightning_core.distributed.ray_common import RayExecutionState, WorkerFailure

__all__ = ["LearnerLineMixin", "LineHost"]

log = logging.getLogger("rlightning")


class LineHost:
    """Mixed into :class:`~rlightning_core.distributed.actors.LearnerActor`: the runners' hub and the iteration."""

    policy: Any
    _hub: Any

    if TYPE_CHECKING:
        def learn(self, progress: float, *chunks: Any, with_weights: bool = False) -> Any: ...  # noqa: D102

        def node_id(self) -> str: ...  # noqa: D102

    def open_line(self) -> tuple[str, str] | None:
        """Listen on a Unix socket for the env runners of this node.

        Returns the node id and the socket's directory (``None``: no Unix socket here). The learner then drives
        each iteration itself (:meth:`collect_and_learn`): one call from the driver instead of a collect call per
        runner, a chunk dependency and a weight transfer.
        """
        from rlightning_core.distributed.channel import ChannelHub

        try:
            self._hub: Any = ChannelHub()
        except OSError:
            return None
        return self.node_id(), os.path.dirname(self._hub.path)

    def attach_line(self, index: int, runner: Any, timeout_s: float) -> str:
        """Connect env runner ``index`` (an actor handle) to this learner's line; returns ``""`` or why not."""
        import ray

        try:
            self._hub.attach(ray, index, runner, timeout_s)
        except Exception as exc:
            self._hub.detach(index)
            text = str(exc).strip()
            return f"{type(exc).__name__}: {text.splitlines()[-1] if text else ''}"
        return ""

    def detach_line(self, index: int) -> None:
        """Drop env runner ``index``'s connection (it is being replaced, or takes Ray calls from now on)."""
        self._hub.detach(index)

    def line_attached(self) -> int:
        """Connections made on the line so far (replacements of failed runners included)."""
        return int(self._hub.attached)

    def collect_and_learn(self, num_steps: int, progress: float, version: int | None,
                          timeouts: dict[int, float]) -> dict[str, Any]:
        """One sync-engine iteration over the line: every runner collects, then the learner learns.

        ``version`` set: the learner's current weights ride the collect requests under that version (the
        driver's sync after the last learn). Every runner in ``timeouts`` (index -> seconds its collect may
        take) is asked at once. Returns ``stats`` by runner and either ``metrics`` (all chunks came; ``error``
        instead if learning raised) or ``failed`` (runner index ->
        :func:`~rlightning_core.distributed.channel.fault_info`): then nothing is learned, the chunks that came
        are held for :meth:`learn_held`, and the driver restarts and re-collects the failed runners.
        """
        from rlightning_core.distributed.channel import fault_info, gather
        from rlightning_core.distributed.ray_common import pack_weights
        from rlightning_core.weights.fingerprint import fingerprint

        ride: tuple[Any, ...] = ()
        sent = None  # the fingerprint of the weights the requests carry (the runners' must equal it)
        if version is not None:
            weights = self.policy.get_weights()
            ride, sent = (pack_weights(weights), version), fingerprint(weights)
        answers, failed = gather(self._hub, (num_steps, *ride), timeouts)
        stats = {i: s for i, (_, s) in answers.items()}
        if failed:
            self._held = {i: chunk for i, (chunk, _) in answers.items()}
            return {"stats": stats, "failed": {i: fault_info(e) for i, e in failed.items()}, "fingerprint": sent}
        try:
            metrics = self._timed_learn(progress, [answers[i][0] for i in sorted(answers)])
        except Exception as exc:  # raised by the driver's learn(), after it recorded this rollout (as over Ray)
            from rlightning_core.distributed.channel import error_info

            return {"stats": stats, "failed": {}, "error": error_info(exc), "fingerprint": sent}
        return {"stats": stats, "failed": {}, "metrics": metrics, "fingerprint": sent}

    def serve_channel(self, path: str, token: bytes, index: int) -> None:
        """Take :meth:`collect_and_learn` calls over the driver's Unix socket until it closes it.

        Runs on the actor's ``channel`` thread. The driver sends the learner nothing else while such a call is
        in flight: the learner's other calls (weights for evaluation, checkpoints) come between iterations.
        """
        from rlightning_core.distributed.channel import serve

        serve(path, token, index, self.collect_and_learn)

    def learn_held(self, progress: float, *chunks: Any) -> dict[str, float]:
        """:meth:`learn` from ``chunks``, where a ``None`` stands for the chunk :meth:`collect_and_learn` held."""
        held, self._held = getattr(self, "_held", {}), {}
        return self.learn(progress, *(held[i] if c is None else c for i, c in enumerate(chunks)))

    def _timed_learn(self, progress: float, chunks: list[Any]) -> dict[str, float]:
        """:meth:`learn`, with its duration as ``perf/learner_busy_s``: the driver's collect call includes it."""
        t0 = time.perf_counter()
        metrics = dict(self.learn(progress, *chunks))
        metrics["perf/learner_busy_s"] = time.perf_counter() - t0
        return metrics

    def close_line(self) -> None:
        """Close the line (the runners' serving threads return) and remove its socket directory."""
        hub = getattr(self, "_hub", None)
        if hub is not None:
            hub.close()


class LearnerLineMixin(RayExecutionState):
    """Mixed into :class:`~rlightning_core.distributed.execution.RayExecution`: the driver's side of the line."""

    _line_node: str | None
    _line_members: set[int]
    _line_ride: int | None
    _line_result: dict[str, Any] | None
    _learner_hub: Any
    _sync_refs: list[Any]

    if TYPE_CHECKING:
        @property
        def rollout_actors(self) -> list[Any]: ...  # noqa: D102

        def _learner_failed(self, exc: BaseException) -> WorkerFailure: ...

        def _get(self, refs: Any, timeout: float, what: str) -> Any: ...

        def _finish_sync(self, *, ignore_errors: bool = False) -> None: ...

        def _settle_runner_calls(self, indices: Any) -> None: ...

        def _call_timeout(self, index: int, steps: int) -> float: ...

        def _expect(self, version: int, value: Any, key: str | None = None) -> None: ...

    def _line_covers_all(self) -> bool:
        """Whether the learner actor can drive this iteration: every env runner is on its line."""
        return self._line_node is not None and len(self._line_members) == len(self.env_group.actors)

    def _open_line(self) -> None:
        """Have the learner actor open its line, and connect the driver to it when it is on this node."""
        opened = self._get(self.learner.open_line.remote(), self.config.cluster.actor_start_timeout_s,
                           "open the learner's line")
        if opened is None:
            log.warning("cluster.local_channel: no Unix socket for the learner's line; env runners take Ray calls")
            return
        self._line_node, self._line_dir = opened
        self._connect_learner(self._line_dir)

    def _connect_learner(self, line_dir: str) -> None:
        """The driver's line to a learner actor on its node: each iteration's call then skips Ray, too.

        The learner's socket directory is also removed when this process exits: a learner killed without
        :meth:`close` (Ray shut down under an unclosed run) cannot remove it itself.
        """
        import shutil
        import weakref

        from rlightning_core.distributed.channel import ChannelHub

        if self._line_node != str(self.ray.get_runtime_context().get_node_id()):
            return
        weakref.finalize(self, shutil.rmtree, line_dir, True)
        try:
            hub = ChannelHub()
        except OSError as exc:
            log.warning("cluster.local_channel: no Unix socket to the learner (%s); it takes Ray calls", exc)
            return
        try:
            hub.attach(self.ray, 0, self.learner, self.config.cluster.actor_start_timeout_s)
        except Exception as exc:
            hub.close()
            if isinstance(exc, self.ray.exceptions.RayActorError):
                raise self._learner_failed(exc) from exc
            log.warning("the learner takes Ray calls: no line from the driver to it (%s)", exc)
            return
        self._learner_hub = hub

    def _ask_learner(self, args: tuple[Any, ...], timeout: float) -> dict[str, Any]:
        """One ``collect_and_learn`` call: over the driver's line to the learner, else a Ray call."""
        hub = self._learner_hub
        try:
            if hub is None:
                return dict(self.ray.get(self.learner.collect_and_learn.remote(*args), timeout=timeout))
            hub.request(0, args)
            return dict(hub.reply(0, time.monotonic() + timeout, "the learner"))
        except (self.ray.exceptions.RayActorError, ChannelLost, ChannelTimeout) as exc:
            raise self._learner_failed(exc) from exc

    def _line_iteration(self, num_steps: int, progress: float) -> tuple[list[Any], list[Any], list[Any]]:
        """One Ray call: the learner asks every runner for a chunk over its line and learns from them.

        Returns ``(chunks, stats, failed)`` for :meth:`collect`'s failure handling: the chunks are ``None``
        (kept by the learner); a failed runner's stats are ``None`` and it is in ``failed`` with its error.
        The learner then learns only in :meth:`learn` (:meth:`LearnerActor.learn_held`), once the failed
        runners were recreated and collected again over Ray calls.
        """
        n = len(self.env_group.actors)
        self._finish_sync()
        self._settle_runner_calls(range(n))  # resets, preprocessor statistics, re-syncs: before the collect
        ride, self._line_ride = self._line_ride, None
        timeouts = {i: self._call_timeout(i, num_steps) for i in range(n)}
        out = self._ask_learner((num_steps, progress, ride, timeouts),
                                sum(timeouts.values()) + self.config.cluster.call_timeout_s)
        if ride is not None:
            self._expect(ride, out.get("fingerprint"))
        stats: list[Any] = [out["stats"].get(i) for i in range(n)]
        failed = [(i, fault_from_info(info)) for i, info in sorted(out["failed"].items())]
        self._line_members.difference_update(i for i, _ in failed)  # the learner dropped their connections
        self._line_result = {"progress": progress, "metrics": out.get("metrics"), "error": out.get("error")}
        return [None] * n, stats, failed

    def _push_line_ride(self) -> None:
        """Weights the learner's line would have carried go over Ray calls (a runner left the line)."""
        version, self._line_ride = self._line_ride, None
        if version is not None:
            ref, fp_ref = self.learner.weights_and_fingerprint.options(num_returns=2).remote()
            self._expect(version, fp_ref)
            self._sync_refs += [a.set_weights.remote(ref, version) for a in self.rollout_actors]
