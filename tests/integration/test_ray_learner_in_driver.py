"""``cluster.num_learners: 0``: ray mode with the learner in the driver process (env runners stay actors)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlightning_core.errors import ConfigError

pytestmark = [pytest.mark.usefixtures("training_plugins")]


def _config(cartpole_config, *overrides):
    return cartpole_config("cluster.mode=ray", "cluster.num_learners=0", "env.num_workers=2", "env.num_envs=2",
                           "engine.eval_every=0", "engine.eval_episodes=2", *overrides)


def _in_sync(ex) -> bool:
    ray = ex.ray
    learner = ex.learner.target.get_weights()
    for actor in ex.env_group.actors:
        copy = ray.get(actor.get_weights.remote())
        if copy.keys() != learner.keys() or not all(np.array_equal(copy[k], learner[k]) for k in learner):
            return False
    return True


@pytest.mark.ray
def test_the_learner_runs_in_the_driver_and_the_runners_get_its_weights_bitwise(ray_cluster, tmp_path,
                                                                                cartpole_config, build_run):
    from rlightning_core.distributed.in_process import InProcessActor

    config = _config(cartpole_config, "engine.total_steps=512", "checkpoint.every=0")
    engine = build_run(config)
    ex = engine.execution
    ray = ex.ray
    assert ex.in_process and isinstance(ex.learner, InProcessActor)
    with pytest.raises(ValueError):
        ray.get_actor("learner-ppo-0")  # no learner actor was created
    assert ex.version == 1 and _in_sync(ex)  # the first sync, before any rollout
    steps = config.engine.params.rollout_steps
    before = ex.learner.target.get_weights()
    for version in (2, 3):
        stats = ex.collect(steps)
        assert {s.weight_version for s in stats} == {version - 1}  # collected with the weights synced last
        metrics = ex.learn(0.0)
        assert np.isfinite(metrics["loss/policy"])
        _, sync_metrics = ex.sync()
        assert ex.version == version and sync_metrics["sync/bytes"] > 0
        # the weights travel with the next collect call, so the runners adopt them before stepping
        assert ray.get(ex.env_group.actors[0].weight_version.remote()) == version - 1
    after = ex.learner.target.get_weights()
    assert any(not np.array_equal(before[k], after[k]) for k in before)  # it learned
    stats = ex.collect(steps)
    assert {s.weight_version for s in stats} == {3}
    assert _in_sync(ex)
    result = engine.run(tmp_path / "run")
    assert result.env_steps == 512 and result.stop_reason == "total_steps"
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("loss/policy" in r for r in rows)


@pytest.mark.ray
def test_a_killed_env_worker_is_recreated_with_the_drivers_weights(ray_cluster, tmp_path, cartpole_config,
                                                                    build_run, kill_env_worker_at):
    config = _config(cartpole_config, "engine.total_steps=768", "checkpoint.every=0")
    engine = build_run(config)
    kill_env_worker_at(engine, ray_cluster)
    result = engine.run(tmp_path / "run")
    assert result.env_steps == 768 and result.stop_reason == "total_steps"
    assert engine.execution.env_group.slots[1].restarts == 1
    assert _in_sync(engine.execution)  # the replacement holds the driver's weights
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["fault/worker_restarts"] for r in rows if "fault/worker_restarts" in r][-1] == 1


@pytest.mark.ray
def test_a_checkpoint_of_an_in_driver_learner_resumes(ray_cluster, tmp_path, cartpole_config, build_run):
    config = _config(cartpole_config, "engine.total_steps=256", "checkpoint.every=0", "checkpoint.at_end=true")
    first = build_run(config)
    first.run(tmp_path / "run")
    saved = first.execution.learner.target.get_weights()
    resumed = build_run(_config(cartpole_config, "engine.total_steps=512", "checkpoint.every=0"))
    restored: dict = {}
    original = resumed.execution.load_state_dict

    def load_and_look(state):
        out = original(state)
        restored["w"] = resumed.execution.learner.target.get_weights()
        return out

    resumed.execution.load_state_dict = load_and_look
    result = resumed.run(tmp_path / "run2", resume_from=tmp_path / "run")
    assert all(np.array_equal(restored["w"][k], saved[k]) for k in saved)
    assert result.env_steps == 512 and result.stop_reason == "total_steps"
    rows = [json.loads(x) for x in (tmp_path / "run2" / "metrics.jsonl").read_text().splitlines()]
    assert min(r["step"] for r in rows if "step" in r) > 256  # it went on from the checkpoint


@pytest.mark.parametrize(("override", "key"), [
    ("engine.type=async", "engine.type"),
    ("cluster.weight_sync=broadcast", "cluster.weight_sync"),
    ("cluster.placement=colocate", "cluster.placement"),
    ("cluster.sharded_buffer=true", "cluster.sharded_buffer"),
    ("cluster.topology=inference_server", "cluster.topology: inference_server"),
    ("policy.device=cuda", "policy.device"),
])
def test_what_needs_a_learner_actor_is_refused_by_key(cartpole_config, override, key):
    with pytest.raises(ConfigError) as info:  # when the config is loaded: before Ray or any actor starts
        _config(cartpole_config, override)
    assert key in str(info.value) and "num_learners: 0" in str(info.value)


@pytest.mark.ray
def test_in_process_actor_resolves_references_and_returns_references(ray_cluster):
    from rlightning_core.distributed.in_process import InProcessActor

    class Target:
        def add(self, a, b=0):
            return a + b

        def pair(self, x):
            return x, -x

        def fail(self):
            raise KeyError("boom")

    handle = InProcessActor(ray_cluster, Target())
    ref = handle.add.remote(ray_cluster.put(40), b=ray_cluster.put(2))
    assert isinstance(ref, ray_cluster.ObjectRef) and ray_cluster.get(ref) == 42
    first, second = handle.pair.options(num_returns=2, num_cpus=1).remote(ray_cluster.put(3))
    assert ray_cluster.get([first, second]) == [3, -3]
    with pytest.raises(KeyError, match="boom"):
        handle.fail.remote()


def test_the_dry_run_plan_says_where_the_learner_is_and_how_weights_travel(cartpole_config):
    from rlightning_core.distributed.plan import describe_ray_plan, weight_sync_plan

    config = _config(cartpole_config)
    text = "\n".join(describe_ray_plan(config, ["CartPole-v1"] * 2))  # before the weights' size is known
    assert "weight sync: auto, decided at start-up from the size of the policy's weights: up to 1 MiB inline " \
           "(numpy weights ride each env runner's next collect call), else one ray.put per sync" in text
    small = weight_sync_plan(config, weights_nbytes=36 << 10)
    assert (small.transport, small.scheme) == ("inline", "queued")
    assert "weight sync: inline (36 KiB of weights, at most 1 MiB): the learner in the driver sends its numpy " \
           "weights with each env runner's next collect call" in "\n".join(describe_ray_plan(config, ["x"] * 2, small))
    big = weight_sync_plan(config, weights_nbytes=3 << 20)
    assert big.transport == "object_store"
    assert "weight sync: object_store from the learner in the driver (weight_sync: auto: 3 MiB of weights, over " \
           "1 MiB): one ray.put per sync" in "\n".join(describe_ray_plan(config, ["x"] * 2, big))
    assert "collect calls: Ray calls; the chunks go to the learner in the driver as object refs" in text
    assert "broadcast" not in text and "learners:" not in text
