"""The asynchronous off-policy engine: collection goes on while the learner trains (SAC, DQN and friends).

Two shapes behind one engine, chosen by whether the execution runs submitted work concurrently
(:attr:`~rlightning_core.engine.contract.Execution.concurrent`); both use only the execution contract:

- **one process** (``local``): each iteration interleaves, in a fixed order, *collect* (every runner steps its
  envs ``rollout_steps`` times with the rollout copy) -> *insert* (chunks within the staleness bound enter the
  replay buffer) -> *learn* (one ``learn()`` call; the policy makes the updates the new data warrants) ->
  *sync* (every ``sync_every`` updates). Nothing runs concurrently, so a seed reproduces a run bit for bit.
- **Ray** (``ray``): env-runner actors collect chunks back to back while the learner actor (which holds the
  buffer) learns; with an on-policy buffer (PPO's) it learns from each whole rollout assembled from the chunks.
  The driver only moves object refs. A finished chunk goes straight into the learner's next ``learn`` call
  (chunks travel runner -> object store -> learner); two learn calls are kept queued so the learner never waits
  for the driver; every ``sync_every`` updates the learner's weights are published through the object store,
  queued behind each runner's current chunk, so neither side waits for the other. A runner pauses while
  ``max_chunks_in_flight`` of its chunks are unconsumed (the learner sets the pace). A learn call takes every
  ready chunk, or the oldest ``max_chunks_per_learn`` of them.

Every chunk carries the weight version it was collected with; its *policy lag* is the learner's version when
it enters the buffer minus that version (an on-policy buffer takes a chunk only with one of every other column,
so a chunk that waited for a later rollout is measured then: :mod:`rlightning_core.engine.assembly`). Chunks
whose lag exceeds ``max_staleness`` are dropped, so no transition enters the buffer (and is ever sampled) from a
policy more than ``max_staleness`` versions old.

Metrics (besides the policy's ``loss/*`` and ``stats/*``): ``async/policy_lag_min|mean|max`` (over the chunks
that reached the learner this iteration), ``async/dropped_chunks`` (total), ``async/buffer_size``,
``perf/collect_sps`` (env steps per second of collection), ``perf/updates_per_s`` (learner updates per second
of learning), ``perf/learner_idle_frac`` and ``perf/rollout_idle_frac`` (fractions of the iteration's wall time
the learner / the env runners spent not working), ``perf/weight_version``.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np

from rlightning_core.engine.base import BaseEngine

__all__ = ["AsyncEngine"]

#: Learn calls queued on the learner actor at once: one running, one waiting, so it never idles between them.
LEARN_PIPELINE = 2


def lag_metrics(lags: list[int], dropped: int) -> dict[str, float]:
    """``async/policy_lag_*`` over the chunks of one iteration, and the dropped-chunk total."""
    out = {"async/dropped_chunks": float(dropped)}
    if lags:
        out.update({"async/policy_lag_min": float(min(lags)), "async/policy_lag_mean": float(np.mean(lags)),
                    "async/policy_lag_max": float(max(lags))})
    return out


def within(lag: int, bound: int | None) -> bool:
    """Whether a chunk with policy lag ``lag`` may enter the buffer."""
    return bound is None or lag <= bound


class AsyncEngine(BaseEngine):
    """Off-policy loop. Params: :class:`rlightning_core.engine.params.AsyncEngineParams`."""

    def __init__(self, params: Any, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.updates = 0
        """Learner updates (gradient steps) so far, as the policy reports them (``stats/updates``)."""
        self.updates_at_sync = 0
        self.dropped_chunks = 0
        self.stream: Stream | None = Stream(self) if self.execution.concurrent else None

    # -- the loop ----------------------------------------------------------------------------------------
    def iteration(self) -> dict[str, float]:
        """One iteration: one chunk per runner in one process; as many events as that many steps on Ray."""
        if self.stream is not None:
            return self.stream.iteration()
        return self._local_iteration()

    def _count_updates(self, metrics: dict[str, float]) -> int:
        """Updates a learn call made (``stats/updates``; a policy that does not say counts as one)."""
        n = int(metrics.get("stats/updates", 1))
        self.updates += n
        return n

    def _sync_due(self) -> bool:
        return self.updates - self.updates_at_sync >= self.params.sync_every

    def _local_iteration(self) -> dict[str, float]:
        clock = time.perf_counter
        execution, bound = self.execution, self.params.max_staleness
        start, steps_before = clock(), self.env_steps
        # collect: every runner steps its envs T times with the rollout copy
        collected = execution.collect_chunks(self.params.rollout_steps)
        for _, stats in collected:
            self.record_rollout(stats)
        t_collect = clock()
        # insert: chunks within the staleness bound enter the buffer
        version = execution.version
        lags = [version - int(stats.weight_version) for _, stats in collected]
        kept = [chunk for (chunk, _), lag in zip(collected, lags, strict=True) if within(lag, bound)]
        self.dropped_chunks += len(collected) - len(kept)
        execution.add_chunks(kept)
        # learn: the policy makes the updates the new data warrants
        progress = min(1.0, self.env_steps / self.config.engine.total_steps)
        metrics = execution.learn(progress)
        updates = self._count_updates(metrics)
        t_learn = clock()
        # sync: every sync_every updates the rollout copy receives the learner's weights
        if self._sync_due():
            _, sync_metrics = execution.sync()
            metrics.update(sync_metrics)
            self.updates_at_sync = self.updates
        end = clock()
        collect_s, learn_s, total = t_collect - start, t_learn - t_collect, end - start
        self.profile["learn"] += learn_s
        self.profile["sync"] += end - t_learn
        metrics.update(lag_metrics(lags, self.dropped_chunks))
        metrics.update({
            "perf/weight_version": float(execution.version),
            "perf/collect_s": collect_s,
            "perf/collect_sps": (self.env_steps - steps_before) / collect_s if collect_s > 0 else 0.0,
            "perf/updates_per_s": updates / learn_s if learn_s > 0 else 0.0,
            "perf/learner_idle_frac": 1.0 - learn_s / total if total > 0 else 0.0,
            "perf/rollout_idle_frac": 1.0 - collect_s / total if total > 0 else 0.0,
            "async/buffer_size": float(execution.buffer_size()),
        })
        return metrics

    # -- checkpoints -------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """BaseEngine's state plus the update and drop counters."""
        state = super().state_dict()
        state["async_engine"] = {"updates": self.updates, "updates_at_sync": self.updates_at_sync,
                                 "dropped_chunks": self.dropped_chunks}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        super().load_state_dict(state)
        counters = state.get("async_engine", {})
        self.updates = int(counters.get("updates", 0))
        self.updates_at_sync = int(counters.get("updates_at_sync", self.updates))
        self.dropped_chunks = int(counters.get("dropped_chunks", 0))


class Stream:
    """The concurrent shape of :class:`AsyncEngine`: runners stream chunks into the learner's buffer as it learns.

    It uses the execution's streaming calls (``start_collect``, ``start_learn``, ``wait``, ...).

    The driver keeps, per runner, the chunks launched and not yet consumed by the learner (at most
    ``max_chunks_in_flight``), a list of finished chunks waiting for the learner, and up to
    :data:`LEARN_PIPELINE` learn calls queued on the learner. It reacts to whichever finishes first.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        import torch

        # the driver evaluates with a policy copy: as in one process, use the configured torch threads (the
        # default, one per core, oversubscribes a machine whose cores the actors already use)
        torch.set_num_threads(engine.config.policy.num_threads)
        self.engine = engine
        self.execution = engine.execution
        self.num_runners = self.execution.num_runners
        #: per runner: (chunk_ref, stats_ref) launched, in launch order (an actor runs them in that order)
        self.collecting: list[deque[tuple[Any, Any]]] = [deque() for _ in range(self.num_runners)]
        #: per runner: chunks launched and not yet consumed by a finished learn call
        self.unconsumed = [0] * self.num_runners
        #: finished chunks waiting for the next learn call: (chunk_ref, runner index)
        self.ready: list[tuple[Any, int]] = []
        #: learn calls queued on the learner: (result ref, runner index of each chunk it carries)
        self.learning: deque[tuple[Any, list[int]]] = deque()

    def _launch(self) -> None:
        steps = self.engine.params.rollout_steps
        for i in range(self.num_runners):
            while self.unconsumed[i] < self.engine.params.max_chunks_in_flight:
                self.collecting[i].append(self.execution.start_collect(i, steps))
                self.unconsumed[i] += 1

    def _submit_learn(self) -> None:
        most = self.engine.params.max_chunks_per_learn
        while self.ready and len(self.learning) < LEARN_PIPELINE:
            take = len(self.ready) if most is None else most
            chunks, self.ready = self.ready[:take], self.ready[take:]
            progress = min(1.0, self.engine.env_steps / self.engine.config.engine.total_steps)
            ref = self.execution.start_learn(progress, [c for c, _ in chunks], version=self.execution.version,
                                             max_staleness=self.engine.params.max_staleness)
            self.learning.append((ref, [i for _, i in chunks]))

    def _runner_lost(self, i: int) -> None:
        """Runner ``i`` died (and was recreated): its queued chunks are gone."""
        self.unconsumed[i] -= len(self.collecting[i])
        self.collecting[i].clear()

    def iteration(self) -> dict[str, float]:
        """Handle events until ``rollout_steps`` steps per env are collected and a learn call finished.

        (The second condition only while the learner has work.) Busy time is attributed to the iteration by
        interval: a chunk or learn call that finished at ``t`` after ``d`` seconds of work occupied
        ``[t - d, t]``, clipped to the iteration.
        """
        engine, ex, clock = self.engine, self.execution, time.perf_counter
        target = ex.steps_per_collect(engine.params.rollout_steps)
        start, steps_before = clock(), engine.env_steps
        collect_busy = learner_busy = 0.0
        updates, learn_calls = 0, 0
        lags: list[int] = []
        learned: list[dict[str, float]] = []
        sync_metrics: dict[str, float] = {}
        timeout = engine.config.cluster.call_timeout_s
        while engine.env_steps - steps_before < target or (self.learning and not learn_calls):
            self._launch()
            self._submit_learn()
            heads = {q[0][1]: i for i, q in enumerate(self.collecting) if q}
            waiting = [*heads, *([self.learning[0][0]] if self.learning else [])]
            done = ex.wait(waiting, timeout)
            now = clock()
            for ref in done:
                if ref in heads:  # a chunk is collected: account it and queue it for the learner
                    i = heads[ref]
                    chunk_ref, stats_ref = self.collecting[i].popleft()
                    stats = ex.finish_collect(i, stats_ref)
                    if stats is None:
                        self.unconsumed[i] -= 1
                        self._runner_lost(i)
                        continue
                    engine.record_rollout(stats)
                    collect_busy += min(stats.env_s + stats.inference_s, now - start)
                    self.ready.append((chunk_ref, i))
                else:  # a learn call finished: its chunks are consumed; publish weights when due
                    result_ref, runners = self.learning.popleft()
                    info = ex.finish_learn(result_ref)
                    for i in runners:
                        self.unconsumed[i] -= 1
                    metrics = info["metrics"]
                    learn_calls += 1
                    updates += engine._count_updates(metrics)
                    learner_busy += min(info["busy_s"], now - start)
                    lags += info["lags"]
                    engine.dropped_chunks += info["dropped"]
                    if "stats/updates" not in metrics or metrics["stats/updates"] > 0:
                        learned.append(metrics)
                    if engine._sync_due():
                        _, sync_metrics = ex.publish_weights()
                        engine.updates_at_sync = engine.updates
        wall = clock() - start
        metrics = _mean_metrics(learned)
        metrics.update(sync_metrics)
        metrics["stats/updates"] = float(updates)
        metrics.update(lag_metrics(lags, engine.dropped_chunks))
        metrics.update({
            "perf/weight_version": float(ex.version),
            "perf/collect_sps": (engine.env_steps - steps_before) / wall if wall > 0 else 0.0,
            "perf/updates_per_s": updates / wall if wall > 0 else 0.0,
            "perf/learner_idle_frac": max(0.0, 1.0 - learner_busy / wall) if wall > 0 else 0.0,
            "perf/rollout_idle_frac": (max(0.0, 1.0 - collect_busy / (self.num_runners * wall))
                                       if wall > 0 else 0.0),
        })
        engine.profile["learn"] += learner_busy
        return metrics


def _mean_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    """Per key, the mean over the learn calls that reported it."""
    keys = {k for row in rows for k in row}
    return {k: float(np.mean([row[k] for row in rows if k in row])) for k in sorted(keys)}
