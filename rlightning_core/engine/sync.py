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
        # collect: every runner steps its envs T times with the rollout copy
        for runner in self.runners:
            chunk, stats = runner.collect(self.params.rollout_steps)
            self.buffer.add(chunk)
            self.record_rollout(stats)
        # learn: the learner updates from the whole rollout
        t0 = clock()
        progress = min(1.0, self.env_steps / self.config.engine.total_steps)
        metrics = self.policy_group.learn(self.buffer, progress=progress)
        if hasattr(self.buffer, "reset"):
            self.buffer.reset()
        t1 = clock()
        # sync: rollout copies receive the new weights
        version = self.policy_group.sync_weights()
        t2 = clock()
        self.profile["learn"] += t1 - t0
        self.profile["sync"] += t2 - t1
        metrics["perf/weight_version"] = version
        return metrics
