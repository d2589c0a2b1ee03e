"""Ray mode on a real multi-node cluster (a head and three worker nodes, each its own raylet; see conftest.py).

Runs join it through ``cluster.address``. What each test reads about the run comes from the run's own actors
(``node_id``, ``get_weights``) through hooks, at the run's events: after iteration k's metrics, at its end.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _rows(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _assert_equal(weights, reference, who):
    assert weights.keys() == reference.keys(), who
    for key in reference:
        np.testing.assert_array_equal(weights[key], reference[key], err_msg=f"{who}: {key}")  # bit for bit


def _with_hooks(engine, **hooks):
    """``engine`` with a plugin whose hooks are ``hooks`` (name -> function)."""
    from rlightning_core import hookimpl
    from rlightning_core.plugins import load_plugins

    plugin = type("Probe", (), {name: hookimpl(fn) for name, fn in hooks.items()})()
    engine.plugins = load_plugins(extra=[("probe", plugin)])
    return engine


def _nodes(execution):
    """The node of the learner (rank 0) and of every env runner."""
    ray = execution.ray
    runners = [a.node_id.remote() for a in execution.env_group.actors]
    return ray.get(execution.learner.node_id.remote()), ray.get(runners)


@pytest.mark.parametrize(("placement", "transport"), [("default", "object_store"), ("disaggregate", "broadcast")])
def test_env_runners_spread_over_nodes_train_cartpole_with_weights_equal_everywhere(
        joined, tmp_path, config_for, build, placement, transport):
    config = config_for(joined.address, f"cluster.placement={placement}", f"cluster.weight_sync={transport}",
                        "env.num_workers=3", "engine.total_steps=60000", "engine.eval_episodes=4")
    engine = build(config)
    seen: dict = {}

    def on_run_end(run_dir, status, error):
        ex = engine.execution
        seen["nodes"] = _nodes(ex)
        seen["learner"] = ex.ray.get(ex.learner.get_weights.remote())
        seen["copies"] = ex.ray.get([a.get_weights.remote() for a in ex.env_group.actors])
        seen["versions"] = ex.ray.get([a.weight_version.remote() for a in ex.env_group.actors])
        seen["version"], seen["verified"] = ex.version, ex.verified_copies

    result = _with_hooks(engine, on_run_end=on_run_end).run(tmp_path / "run")
    assert result.stop_reason == "target_eval_return", result
    assert engine.execution.strategy == transport
    learner_node, runner_nodes = seen["nodes"]
    workers = {n.node_id for n in joined.workers}
    assert {learner_node, *runner_nodes} <= workers  # the head has no CPUs: nothing runs there
    assert len(set(runner_nodes)) > 1, runner_nodes  # 3 one-CPU runners cannot share a 2-CPU node
    if placement == "disaggregate":  # SPREAD: 4 bundles over 3 nodes use every node
        assert {learner_node, *runner_nodes} == workers
    assert any(n != learner_node for n in runner_nodes)
    # every rollout copy, on its node, holds the learner's last weights bit for bit ...
    for w, copy in enumerate(seen["copies"]):
        _assert_equal(copy, seen["learner"], f"env runner {w} on node {runner_nodes[w]}")
    assert seen["versions"] == [seen["version"]] * 3
    assert seen["verified"] >= 3 * (seen["version"] - 1)  # ... and was checked against it after every sync
    assert [r["fault/worker_restarts"] for r in _rows(tmp_path / "run") if "fault/worker_restarts" in r][-1] == 0


def _wait_until_dead(actors):
    """Return once a call to each of ``actors`` fails: its process may outlive its node's raylet for a while."""
    import time

    import ray

    deadline = time.monotonic() + 120  # a guard against a hang, not a timing assumption
    for actor in actors:
        while True:
            try:
                ray.get(actor.node_id.remote(), timeout=30)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                break
            assert time.monotonic() < deadline, "an env runner on the removed node still answers after 120 s"
            time.sleep(0.1)


KILL_AT = 2  # the iteration after whose metrics a node is removed
STEPS = 6 * 32 * 3 * 4  # 6 iterations of 32 steps x 3 env workers x 4 envs


def test_a_removed_node_s_env_runners_are_recreated_on_the_surviving_nodes(joined, tmp_path, config_for, build):
    # disaggregate: the dead node's bundles are re-placed by Ray on the surviving nodes, the new runners in them
    config = config_for(joined.address, "cluster.placement=disaggregate", "env.num_workers=3",
                        f"engine.total_steps={STEPS}", "engine.eval_every=0", "engine.eval_episodes=1")
    engine = build(config)
    seen: dict = {}

    def on_metrics(step, metrics):
        if metrics.get("iteration") != KILL_AT or "before" in seen:
            return
        learner, runners = seen["before"] = _nodes(engine.execution)
        # a node holding env runners and not the learner (SPREAD: 4 bundles, 3 nodes, one actor or two each)
        victim = next(n for n in runners if n != learner)
        seen["victim"], seen["lost"] = victim, [i for i, n in enumerate(runners) if n == victim]
        joined.remove(joined.node_with_id(victim))
        _wait_until_dead([engine.execution.env_group.actors[i] for i in seen["lost"]])

    def on_run_end(run_dir, status, error):
        seen["after"] = _nodes(engine.execution)
        seen["restarts"] = [s.restarts for s in engine.execution.env_group.slots]

    try:
        result = _with_hooks(engine, on_metrics=on_metrics, on_run_end=on_run_end).run(tmp_path / "run")
    finally:
        joined.add_worker()  # the module's cluster keeps three worker nodes
    assert result.stop_reason == "total_steps" and result.env_steps == STEPS, result
    learner_after, runners_after = seen["after"]
    assert learner_after == seen["before"][0]  # the learner (its buffer and optimizer) was not touched
    assert seen["victim"] not in runners_after  # every runner now lives on a surviving node
    lost = seen["lost"]
    # exactly the lost runners were recreated; a replacement Ray placed on the node before it declared the node
    # dead dies with it and is recreated again, so how often depends on when Ray notices (each one is counted)
    assert [i for i, n in enumerate(seen["restarts"]) if n] == lost
    rows = _rows(tmp_path / "run")
    restarts = [r["fault/worker_restarts"] for r in rows if "fault/worker_restarts" in r]
    assert restarts[0] == 0 and restarts[-1] == sum(seen["restarts"])  # counted in the run's metrics
    assert [r["iteration"] for r in rows if "iteration" in r] == list(range(1, 7))  # none lost or repeated
    ledger = [json.loads(x) for x in (tmp_path / "run" / "seeds.jsonl").read_text().splitlines()]
    assert sorted({e["rank"] for e in ledger if e["role"] == "env" and e["restart"] >= 1}) == lost


def test_data_parallel_learners_on_two_nodes_end_identical(joined, tmp_path, config_for, build):
    config = config_for(joined.address, "cluster.num_learners=2", "cluster.placement=disaggregate",
                        "engine.total_steps=1024", "engine.eval_every=0", "engine.eval_episodes=1")
    engine = build(config)
    seen: dict = {}

    def on_run_start(config, run_dir):
        seen["initial"] = engine.execution.ray.get(engine.execution.learner.get_weights.remote())

    def on_run_end(run_dir, status, error):
        ray, learners = engine.execution.ray, engine.execution.learners
        seen["nodes"] = ray.get([ln.node_id.remote() for ln in learners])
        seen["weights"] = ray.get([ln.get_weights.remote() for ln in learners])

    result = _with_hooks(engine, on_run_start=on_run_start, on_run_end=on_run_end).run(tmp_path / "run")
    assert result.stop_reason == "total_steps", result
    assert len(set(seen["nodes"])) == 2, seen["nodes"]  # SPREAD: one learner per node
    first, second = seen["weights"]
    _assert_equal(second, first, "learner rank 1")
    assert any(not np.array_equal(seen["initial"][k], first[k]) for k in first)  # they learned, identically
