"""The synchronous on-policy engine: collect T steps -> learn -> sync weights -> log/checkpoint/evaluate."""

from __future__ import annotations

import time

from rlightning_core.engine.base import BaseEngine

__all__ = ["SyncEngine"]


class SyncEngine(BaseEngine):
    """On-policy loop (PPO and friends). Params: :class:`rlightning_core.engine.params.SyncEngineParams`."""

    def iteration(self) -> dict[str, float]:
        """One iteration, phase by phase."""
        clock = time.perf_counter
        total, steps = self.config.engine.total_steps, self.params.rollout_steps
        # collect: every runner steps its envs T times with its rollout copy; chunks go to the learner side
        start, steps_before = clock(), self.env_steps
        for stats in self.execution.collect(steps):
            self.record_rollout(stats)
        collect_s = clock() - start
        # learn: the learner updates from the whole rollout
        t0 = clock()
        progress = min(1.0, self.env_steps / total)
        metrics = self.execution.learn(progress)
        t1 = clock()
        # sync: rollout copies receive the new weights
        version, sync_metrics = self.execution.sync()
        t2 = clock()
        self.profile["learn"] += t1 - t0
        self.profile["sync"] += t2 - t1
        metrics.update(sync_metrics)
        metrics["perf/weight_version"] = version
        metrics["perf/collect_s"] = collect_s
        metrics["perf/collect_sps"] = (self.env_steps - steps_before) / collect_s if collect_s > 0 else 0.0
        return metrics
