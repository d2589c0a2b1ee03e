"""Chained learn in ray mode: the learn after a collect is submitted with it and runs exactly once."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("training_plugins")]


def _config(cartpole_config, *overrides):
    # over Ray calls: the learner actor's line (tests/integration/test_ray_learner_line.py) does not chain
    return cartpole_config("cluster.mode=ray", "cluster.local_channel=false", "env.num_workers=2", "env.num_envs=4",
                           "checkpoint.every=0", "engine.total_steps=768", "engine.eval_every=0",
                           "engine.eval_episodes=2", *overrides)


def _learner_weights(execution):
    return execution.ray.get(execution.learner.get_weights.remote())


def _learn_count(execution) -> int:
    """The learner policy's weight version: bumped by every learn call it ran."""
    return int(execution.ray.get(execution.learner.state_dict.remote())["learner"]["weight_version"])


def test_chained_learn_runs_once_with_the_chained_progress(ray_cluster, cartpole_config, build_run):
    engine = build_run(_config(cartpole_config))
    ex = engine.execution
    assert ex.steps_per_collect(32) == 32 * 8
    before = _learner_weights(ex)
    version0 = _learn_count(ex)
    ex.chain_learn(0.25)
    stats = ex.collect(32)
    assert sum(s.steps for s in stats) == 256
    metrics = ex.learn(0.25)
    assert metrics["stats/lr"] == pytest.approx(engine.config.policy.params.lr * 0.75)  # the chained progress
    assert _learn_count(ex) == version0 + 1  # learned exactly once
    after = _learner_weights(ex)
    assert any(not np.array_equal(before[k], after[k]) for k in before)
    version, _ = ex.sync()
    for actor in ex.env_group.actors:  # the weights went learner -> runners directly: bit for bit, versioned
        got = ray_cluster.get(actor.get_weights.remote())
        assert all(np.array_equal(got[k], after[k]) for k in after)
        assert ray_cluster.get(actor.weight_version.remote()) == version
    # a learn with another progress than the chained one is refused (the chained one already ran)
    ex.chain_learn(0.5)
    ex.collect(32)
    with pytest.raises(RuntimeError, match="chain_learn"):
        ex.learn(0.75)
    # an unchained collect/learn still works
    ex.collect(32)
    ex.learn(0.9)
    assert _learn_count(ex) == version0 + 3
    ex.close()


def test_a_killed_runner_voids_the_chained_learn(ray_cluster, cartpole_config, build_run):
    """The chained learn depends on the dead runner's chunk: it fails unrun, and learn() resubmits."""
    engine = build_run(_config(cartpole_config, "cluster.max_restarts=2"))
    ex = engine.execution
    version0 = _learn_count(ex)
    ex.chain_learn(0.1)
    ray_cluster.kill(ex.env_group.actors[1], no_restart=True)
    stats = ex.collect(32)
    assert sum(s.restarts for s in stats) == 1
    ex.learn(0.1)
    assert _learn_count(ex) == version0 + 1
    ex.close()
