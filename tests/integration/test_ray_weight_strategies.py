"""The double_buffer and node_shared weight-sync strategies on a real local Ray cluster."""

from __future__ import annotations

import glob
import json
import os

import numpy as np
import pytest

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("training_plugins")]


def ray_config(cartpole_config, *overrides):
    return cartpole_config("cluster.mode=ray", "env.num_workers=2", "env.num_envs=4", "checkpoint.every=0",
                           "engine.total_steps=768", "engine.eval_every=0", "engine.eval_episodes=2", *overrides)


def runner_matches_learner(ray, execution, actor) -> bool:
    learner = ray.get(execution.learner.get_weights.remote())
    weights = ray.get(actor.get_weights.remote())
    return weights.keys() == learner.keys() and all(np.array_equal(weights[k], learner[k]) for k in learner)


def test_double_buffer_keeps_acting_during_a_transfer_then_swaps_bit_for_bit(ray_cluster, cartpole_config,
                                                                              build_run):
    ray = ray_cluster
    engine = build_run(ray_config(cartpole_config, "cluster.weight_sync=double_buffer"))
    ex = engine.execution
    actors = ex.env_group.actors
    assert ex.version == 1 and all(runner_matches_learner(ray, ex, a) for a in actors)  # first sync: complete
    ex.collect(32)
    ex.learn(0.0)
    assert not runner_matches_learner(ray, ex, actors[0])  # the learner moved on
    # a transfer in flight: the runners wait for rank 0's broadcast in their receive thread ...
    staging = [a.stage_weights.options(concurrency_group="weights").remote(2) for a in actors]
    # ... and meanwhile they keep acting with the weights they have
    chunk_refs = [a.collect.options(num_returns=2).remote(8) for a in actors]
    chunks = ray.get([c for c, _ in chunk_refs], timeout=30)
    assert [c.weight_version for c in chunks] == [1, 1]
    ready, _ = ray.wait(staging, num_returns=2, timeout=0)
    assert not ready  # the transfer was still in flight the whole time
    # rank 0 sends: the staging buffers fill; the live weights stay until a step boundary
    ray.get([ex.learner.broadcast_weights.remote(2), *staging], timeout=30)
    assert ray.get(actors[0].weight_version.remote()) == 1
    assert not runner_matches_learner(ray, ex, actors[0])
    chunks = ray.get([a.collect.options(num_returns=2).remote(1)[0] for a in actors], timeout=30)
    assert [c.weight_version for c in chunks] == [2, 2]  # swapped before the first step
    assert all(runner_matches_learner(ray, ex, a) for a in actors)
    # the engine's own path: sync returns at once, the next collect swaps; versions only go up
    ex.version = 2
    seen = []
    for _ in range(3):
        ex.collect(32)
        ex.learn(0.0)
        version, _ = ex.sync()
        ex.weight_sync.transport.drain()  # the transfer is done; the swap happens at the next step
        stats = ex.collect(1)
        seen.append(version)
        assert {s.weight_version for s in stats} == {version}
        assert all(runner_matches_learner(ray, ex, a) for a in actors)
    assert seen == [3, 4, 5]
    assert ray.get(actors[0].__ray_call__.remote(lambda self: self.swaps)) >= 4
    ex.close()


def test_node_shared_loads_one_node_copy_bit_for_bit(ray_cluster, cartpole_config, build_run):
    ray = ray_cluster
    engine = build_run(ray_config(cartpole_config, "cluster.weight_sync=node_shared"))
    ex = engine.execution
    actors = ex.env_group.actors
    shm = ex.weight_sync.transport
    assert shm.learner_writes and shm.leaders == [] and shm.nodes == 1  # one node: one copy
    files = glob.glob(f"/dev/shm/rlightning-weights-{shm.token}-*")
    assert len(files) == 1 and os.path.getsize(files[0]) > 0
    assert all(runner_matches_learner(ray, ex, a) for a in actors)
    versions = []
    for _ in range(3):
        ex.collect(32)
        ex.learn(0.0)
        version, metrics = ex.sync()
        versions.append(version)
        assert metrics["sync/node_copies"] == 1.0 and metrics["sync/rollout_pause_s"] >= 0
        assert all(runner_matches_learner(ray, ex, a) for a in actors)
        assert ray.get([a.weight_version.remote() for a in actors]) == [version, version]
    assert versions == [2, 3, 4]
    chunk_ref, _ = actors[0].collect.options(num_returns=2).remote(2)
    assert ray.get(chunk_ref).weight_version == 4
    # a worker on another node would be that node's writer, fed once through the object store
    shm.leaders = [actors[1]]
    shm.nodes = 2
    ex.collect(32)
    ex.learn(0.0)
    ex.sync()
    assert all(runner_matches_learner(ray, ex, a) for a in actors)
    ex.close()
    assert not os.path.exists(files[0])  # the run's shared-memory file is removed


@pytest.mark.parametrize("strategy", ["double_buffer", "node_shared"])
def test_training_runs_with_the_strategy_and_a_killed_worker_is_resynced(ray_cluster, tmp_path, cartpole_config,
                                                                         build_run, strategy,
                                                                         kill_env_worker_at):
    engine = build_run(ray_config(cartpole_config, f"cluster.weight_sync={strategy}", "engine.total_steps=1536"))
    kill_env_worker_at(engine, ray_cluster)
    result = engine.run(tmp_path / "run")
    assert result.env_steps == 1536 and result.stop_reason == "total_steps"
    assert engine.execution.env_group.slots[1].restarts == 1
    # the seed ledger: every worker's start, then the restart with a seed of its own
    ledger = [json.loads(x) for x in (tmp_path / "run" / "seeds.jsonl").read_text().splitlines()]
    starts = [e for e in ledger if e["event"] == "start"]
    assert {(e["role"], e["rank"]) for e in starts} == {("learner", 0), ("env", 0), ("env", 1), ("rollout", 0),
                                                          ("rollout", 1)}
    restarts = [e for e in ledger if e["event"] == "restart"]
    assert {(e["role"], e["rank"], e["restart"]) for e in restarts} == {("env", 1, 1), ("rollout", 1, 1)}
    for role in ("env", "rollout"):
        first = next(e["seed"] for e in starts if (e["role"], e["rank"]) == (role, 1))
        again = next(e["seed"] for e in restarts if e["role"] == role)
        assert again != first and again not in {e["seed"] for e in starts}
