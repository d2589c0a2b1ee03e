"""After every sync, each rollout copy's weights are checked against the learner's (a cheap fingerprint).

Real syncs over every transport there is, on a real local Ray cluster: they agree, and every copy is checked; a
rollout copy holding other weights under the learner's version number stops the run, naming the worker.
"""

from __future__ import annotations

import numpy as np
import pytest

from rlightning_core.distributed.weight_check import WeightSyncMismatch

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("training_plugins")]

SMALL = ("cluster.mode=ray", "env.num_workers=2", "env.num_envs=4", "checkpoint.every=0", "engine.eval_every=0",
         "engine.eval_episodes=2", "engine.total_steps=768")


@pytest.mark.parametrize(("overrides", "transport", "copies"), [
    (("cluster.weight_sync=broadcast",), "broadcast", 2),
    (("cluster.weight_sync=object_store",), "object_store", 2),
    ((), "inline", 2),  # weight_sync: auto with a small CPU policy: the weights ride the learn reply
    (("cluster.num_learners=0",), "inline", 2),  # the learner in the driver: they ride the collect call
    (("env.num_cpus=0.5", "cluster.topology=inference_server", "cluster.num_inference_servers=1",
      "cluster.weight_sync=broadcast"), "broadcast", 1),  # one rollout actor holds the copy
])
def test_every_rollout_copy_is_checked_against_the_learner_after_each_sync(ray_cluster, cartpole_config, build_run,
                                                                           overrides, transport, copies):
    execution = build_run(cartpole_config(*SMALL, *overrides)).execution
    try:
        assert execution.sync_plan.transport == transport
        for _ in range(3):
            execution.collect(32)  # the runners report the weights they collected with
            execution.learn(0.0)
            execution.sync()
        execution.collect(32)
        # the first sync and three more, each checked once on every copy
        assert execution.verified_copies == 4 * copies
    finally:
        execution.close()


def test_the_streaming_engine_s_publications_are_checked(ray_cluster, tmp_path, cartpole_config, build_run):
    config = cartpole_config(*SMALL, "engine.type=async", "engine.params.sync_every=1",
                             "policy.params.hidden_sizes=[32,32]")
    engine = build_run(config)
    assert engine.execution.sync_plan.scheme == "publish"
    engine.run(tmp_path / "run")
    # Each runner reports a version it loaded on the first chunk it collects with it, so both runners' copies are
    # checked; which later publications a runner collects with (and so reports) depends on timing, not counted.
    assert engine.execution.version >= 2
    assert engine.execution.verified_copies >= 2


def test_the_weights_that_ride_the_learn_reply_are_checked(ray_cluster, tmp_path, cartpole_config, build_run):
    engine = build_run(cartpole_config(*SMALL))  # weight_sync: auto, a small CPU policy: inline weights
    assert engine.execution.sync_plan.transport == "inline"
    result = engine.run(tmp_path / "run")
    assert engine.execution.verified_copies >= 2 * result.iterations  # both runners, after every sync


@pytest.mark.parametrize("strategy", ["broadcast", "object_store"])
def test_a_rollout_copy_with_other_weights_than_the_learner_s_stops_the_run_naming_it(ray_cluster, cartpole_config,
                                                                                     build_run, strategy):
    execution = build_run(cartpole_config(*SMALL, f"cluster.weight_sync={strategy}")).execution
    ray = ray_cluster
    try:
        execution.collect(32)
        execution.learn(0.0)
        version, _ = execution.sync()  # queued ahead of each runner's next collect
        victim = execution.env_group.actors[1]
        weights = ray.get(victim.get_weights.remote())  # runs after the sync: version's weights
        name = sorted(weights)[0]
        bad = {k: np.array(v) for k, v in weights.items()}
        bad[name].reshape(-1)[0] += 1.0  # one parameter off, under the right version number
        ray.get(victim.set_weights.remote(bad, version))
        with pytest.raises(WeightSyncMismatch, match=rf"env worker 1 \(env\[0\] CartPole-v1, worker 1\) acts with "
                                                     rf"weight version {version}, but its weights differ from the "
                                                     rf"learner's version {version} \(sampled elements of {name}\)"):
            execution.collect(32)
    finally:
        execution.close()
