"""PPO (an on-policy buffer) under the ``async`` engine on a real local Ray cluster.

Runners collect back to back; the learner assembles whole rollouts from the chunks as they arrive (a fast
runner's next chunk waits for the next rollout), learns from each complete one, and drops chunks past
``max_staleness``. The same config trains in one process, so it must train on Ray too.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("training_plugins")]

TINY = ("cluster.mode=ray", "engine.type=async", "env.num_workers=2", "env.num_envs=2", "checkpoint.every=0",
        "engine.eval_every=0", "engine.eval_episodes=2", "engine.params.rollout_steps=32",
        "policy.params.hidden_sizes=[32,32]")


def _learner_counts(ray, ex):
    return ray.get([ln.__ray_call__.remote(
        lambda self: (self.buffer_kind(), len(getattr(self, "_rollout_queue", [])), self.policy.weight_version,
                      self.buffer_size()))
        for ln in ex.learners])


@pytest.mark.parametrize("sharded", [False, True])
def test_ppo_learns_from_whole_rollouts_under_the_async_engine(ray_cluster, tmp_path, cartpole_config, build_run,
                                                                at_run_end, sharded):
    config = cartpole_config(*TINY, "engine.total_steps=2048", f"cluster.sharded_buffer={str(sharded).lower()}")
    engine = build_run(config)
    seen = at_run_end(engine, lambda ex: _learner_counts(ray_cluster, ex))
    result = engine.run(tmp_path / "run")
    assert result.stop_reason == "total_steps" and result.env_steps >= 2048
    # 2048 steps over 4 envs are 16 rollouts of 32 steps, each one 64-step chunk from each of the 2 runners.
    # Every chunk collected was dropped as too stale, learned from (two per update: one complete rollout), or
    # still waits for its rollout's other half (queued, or already placed in the half-filled buffer), except the
    # runners' last in-flight chunks (at most max_chunks_in_flight each), which may not have reached the learner
    # when the run stopped. How the chunks split between learned and waiting depends on the runners' relative
    # speed, so it is not asserted.
    # The learner's own count of updates (its weight version) is used: a learn call still queued on it when the
    # run stopped runs before the count is read, and may complete a rollout whose chunks were waiting.
    [(kind, queued, learned, stored)] = seen["value"]
    waiting = queued + stored // 64  # a 64-step chunk per column pair placed in the buffer, not yet learned
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    dropped = [r["async/dropped_chunks"] for r in rows if "async/dropped_chunks" in r][-1]
    chunks, in_flight = result.env_steps // 64, 2 * config.engine.params.max_chunks_in_flight
    assert kind == "on_policy" and 1 <= engine.updates <= learned <= 16
    assert chunks - in_flight <= 2 * learned + waiting + dropped <= chunks, (learned, queued, stored, dropped)
    losses = [r["loss/policy"] for r in rows if "loss/policy" in r]
    assert losses and all(np.isfinite(losses))
    assert max(r.get("async/policy_lag_max", 0) for r in rows) <= config.engine.params.max_staleness


def test_data_parallel_ranks_gather_the_same_shard_chunks_and_stay_in_step(ray_cluster, tmp_path, cartpole_config,
                                                                            build_run, at_run_end):
    """Sharded and data-parallel: each rank gathers exactly the chunks its receipts name, so both learn from the
    same rollouts as often (their gradient all-reduces pair up) and end with identical parameters."""
    config = cartpole_config(*TINY, "engine.total_steps=1536", "cluster.sharded_buffer=true",
                             "cluster.num_learners=2")
    engine = build_run(config)

    def read(ex):
        return _learner_counts(ray_cluster, ex), ray_cluster.get([ln.get_weights.remote() for ln in ex.learners])

    seen = at_run_end(engine, read)
    result = engine.run(tmp_path / "run")
    assert result.stop_reason == "total_steps" and engine.updates > 0
    counts, (a, b) = seen["value"]
    assert counts[0] == counts[1]  # same waiting chunks, same number of weight updates
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
