"""In Ray mode each execution call does what its name says: collect collects, learn learns, sync syncs.

Chunks go from the env runners to the learner as object refs passed to its learn call; the learner's weights
reach the runners only in ``sync``.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("training_plugins")]


def _config(cartpole_config, *overrides):
    return cartpole_config("cluster.mode=ray", "env.num_workers=2", "env.num_envs=4", "checkpoint.every=0",
                           "engine.total_steps=768", "engine.eval_every=0", "engine.eval_episodes=2", *overrides)


def _learner_weights(ex) -> dict:
    return ex.ray.get(ex.learner.get_weights.remote())


def _learn_count(ex) -> int:
    """The learner policy's weight version: bumped by every learn call it ran."""
    return int(ex.ray.get(ex.learner.state_dict.remote())["learner"]["weight_version"])


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("weight_sync", ["auto", "broadcast", "object_store"])
def test_collect_collects_learn_learns_and_sync_syncs(ray_cluster, cartpole_config, build_run, weight_sync):
    ex = build_run(_config(cartpole_config, f"cluster.weight_sync={weight_sync}")).execution
    try:
        ray = ex.ray
        before, count = _learner_weights(ex), _learn_count(ex)
        stats = ex.collect(32)
        assert sum(s.steps for s in stats) == 256 and {s.weight_version for s in stats} == {1}
        assert _learn_count(ex) == count and _same(_learner_weights(ex), before)  # collecting learned nothing
        chunks = ex._pending_chunks
        assert len(chunks) == 2 and all(isinstance(c, ray.ObjectRef) for c in chunks)  # refs, not copies
        metrics = ex.learn(0.25)
        assert metrics["stats/lr"] == pytest.approx(ex.config.policy.params.lr * 0.75)  # the progress given
        assert _learn_count(ex) == count + 1  # learned exactly once
        after = _learner_weights(ex)
        assert not _same(after, before)
        for actor in ex.env_group.actors:  # the runners still act with the weights of the last sync
            assert _same(ray.get(actor.get_weights.remote()), before)
        version, _ = ex.sync()
        ex.weight_sync.finish()  # a queued transfer lands before the runners' next collect; wait here to look
        for actor in ex.env_group.actors:  # now every copy holds the learner's weights, bit for bit, versioned
            assert _same(ray.get(actor.get_weights.remote()), after)
            assert ray.get(actor.weight_version.remote()) == version == 2
        stats = ex.collect(32)
        assert {s.weight_version for s in stats} == {2}
    finally:
        ex.close()


def test_a_runner_killed_before_a_collect_is_recreated_and_the_learner_learns_once(ray_cluster, cartpole_config,
                                                                                  build_run):
    ex = build_run(_config(cartpole_config, "cluster.max_restarts=2")).execution
    try:
        count = _learn_count(ex)
        ray_cluster.kill(ex.env_group.actors[1], no_restart=True)
        stats = ex.collect(32)
        assert sum(s.restarts for s in stats) == 1 and sum(s.steps for s in stats) == 256
        ex.learn(0.1)
        assert _learn_count(ex) == count + 1
        ex.sync()
        ex.weight_sync.finish()
        learner = _learner_weights(ex)
        for actor in ex.env_group.actors:
            assert _same(ray_cluster.get(actor.get_weights.remote()), learner)
    finally:
        ex.close()


def test_a_diverged_learner_actor_stops_the_run_with_the_cli_message(ray_cluster, tmp_path, monkeypatch, capsys):
    """A NonFiniteError raised in the learner actor reaches the driver as itself, in learn() (after the rollout
    was recorded): exit 1, the iteration and its env steps named, no traceback."""
    import logging
    from pathlib import Path

    from rlightning_cli.main import main

    cartpole = Path(__file__).resolve().parents[2] / "examples" / "cartpole_ppo.yaml"
    monkeypatch.setattr(logging.getLogger("rlightning"), "handlers", [])  # the CLI adds a stderr handler
    with pytest.raises(SystemExit) as info:
        main(["train", str(cartpole), "cluster.mode=ray", "env.num_workers=2", "env.num_envs=2",
              "policy.params.lr=1e30", "engine.total_steps=4096", "engine.eval_every=0", "checkpoint.every=0",
              "logging.progress=false", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert info.value.code == 1, err
    assert "Error: iteration 1 (128 env steps so far): non-finite values in ppo update" in err, err
    assert "Traceback" not in err
