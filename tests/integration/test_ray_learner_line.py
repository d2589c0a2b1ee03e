"""``cluster.local_channel`` with a learner actor: it drives each iteration over a Unix socket to the runners."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

pytestmark = [pytest.mark.usefixtures("training_plugins")]


def _config(cartpole_config, *overrides):
    return cartpole_config("cluster.mode=ray", "env.num_workers=2", "env.num_envs=2", "engine.eval_every=0",
                           "engine.eval_episodes=2", "checkpoint.every=0", *overrides)


def _weights(ex) -> dict:
    return ex.ray.get(ex.learner.get_weights.remote())


def _in_sync(ex) -> bool:
    learner = _weights(ex)
    for actor in ex.env_group.actors:
        copy = ex.ray.get(actor.get_weights.remote())
        if copy.keys() != learner.keys() or not all(np.array_equal(copy[k], learner[k]) for k in learner):
            return False
    return True


def _look_before_close(ex) -> dict:
    """The learner's weights, whether the runners hold them and the line's state when the run closes its actors."""
    seen: dict = {}
    close = ex.close

    def look_then_close():
        if not seen:
            seen.update(weights=_weights(ex), in_sync=_in_sync(ex), members=set(ex._line_members),
                        attached=ex.ray.get(ex.learner.line_attached.remote()) if ex._line_node else 0)
        close()

    ex.close = look_then_close
    return seen


@pytest.mark.ray
def test_the_learners_line_changes_the_transport_not_the_result(ray_cluster, tmp_path, cartpole_config, build_run):
    """The learner actor collects over its line and learns in the same call; the driver sends one Ray call per
    iteration. The same run over Ray calls ends with bitwise the same learner and observation statistics."""
    outcome = {}
    for line in (True, False):
        config = _config(cartpole_config, "engine.total_steps=768", "preprocessors=[{type: normalize_obs}]",
                         f"cluster.local_channel={str(line).lower()}")
        engine = build_run(config)
        ex = engine.execution
        try:
            assert not ex.in_process
            assert (ex._line_members == {0, 1}) == line
            # the driver's own line to the learner (same node): each iteration's call skips Ray too
            assert (ex._learner_hub is not None and list(ex._learner_hub.conns) == [0]) == line
            if line:
                assert ex.ray.get(ex.learner.line_attached.remote()) == 2
                steps = config.engine.params.rollout_steps
                ex.chain_learn(0.0)
                stats = ex.collect(steps)
                assert [s.weight_version for s in stats] == [1, 1]
                assert np.isfinite(ex.learn(0.0)["loss/policy"])
                version, sync_metrics = ex.sync()
                assert version == 2 and sync_metrics["sync/bytes"] > 0
                assert ex.ray.get(ex.env_group.actors[0].weight_version.remote()) == 1  # rides the next call
                ex.chain_learn(0.0)
                assert {s.weight_version for s in ex.collect(steps)} == {2}
                ex.learn(0.0)
                ex.sync()
                ex.close()
                engine = build_run(config)  # a fresh run for the comparison
                ex = engine.execution
            seen = _look_before_close(ex)
            assert os.path.isdir(ex._line_dir) == line  # the learner's socket directory (mode 0700)
            result = engine.run(tmp_path / f"run-{line}")
            assert result.env_steps == 768 and seen["in_sync"]
            if line:
                assert not os.path.exists(ex._line_dir)  # removed when the run closed
            outcome[line] = (seen["weights"], ex.preprocessors[0].state_dict())
            rows = [json.loads(x) for x in (tmp_path / f"run-{line}" / "metrics.jsonl").read_text().splitlines()]
            versions = [r["perf/weight_version"] for r in rows if "perf/weight_version" in r]
            assert versions == sorted(versions) and versions[-1] > 1
            # engines use only the execution contract: the sync engine no longer chains its learn onto the collect,
            # so the line (reached only through chain_learn, as above) carries no iteration of the run itself
            iterations = [r for r in rows if "perf/collect_s" in r]
            assert not any("perf/learner_busy_s" in r for r in iterations)
        finally:
            ex.close()
    (w_line, s_line), (w_ray, s_ray) = outcome[True], outcome[False]
    assert all(np.array_equal(w_line[k], w_ray[k]) for k in w_ray)
    for key, value in s_ray.items():
        if key != "uid":  # each preprocessor instance's own id
            assert np.array_equal(np.asarray(s_line[key]), np.asarray(value)), key


@pytest.mark.ray
def test_a_killed_env_worker_rejoins_the_learners_line(ray_cluster, tmp_path, cartpole_config, build_run,
                                                       kill_env_worker_at):
    engine = build_run(_config(cartpole_config, "engine.total_steps=768"))
    kill_env_worker_at(engine, ray_cluster)
    ex = engine.execution
    seen = _look_before_close(ex)
    try:
        result = engine.run(tmp_path / "run")
        assert result.env_steps == 768 and result.stop_reason == "total_steps"
        assert ex.env_group.slots[1].restarts == 1
        assert seen["attached"] == 3  # the replacement got its line too
        assert seen["members"] == {0, 1} and seen["in_sync"]
        rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
        assert [r["fault/worker_restarts"] for r in rows if "fault/worker_restarts" in r][-1] == 1
    finally:
        engine.execution.close()


@pytest.mark.parametrize(("override", "line"), [
    ("cluster.num_learners=1", True),
    ("cluster.local_channel=false", False),
    ("cluster.weight_sync=broadcast", False),
    ("cluster.weight_sync=object_store", False),
    ("cluster.num_learners=2", False),
    ("cluster.topology=inference_server cluster.num_inference_servers=1", False),
    ("cluster.sharded_buffer=true", False),
    ("cluster.offload=true", False),
    ("cluster.learner_num_gpus=1", False),
])
def test_which_runs_the_learners_line_serves(cartpole_config, override, line):
    from rlightning_core.distributed.ray_common import learner_line_possible

    assert learner_line_possible(_config(cartpole_config, *override.split()).cluster) == line


def test_the_dry_run_plan_names_the_learners_line(cartpole_config):
    from rlightning_core.distributed.plan import describe_ray_plan

    text = "\n".join(describe_ray_plan(_config(cartpole_config), ["CartPole-v1"] * 2))
    assert "collect calls: the learner actor asks the env runners on its node over a Unix socket" in text
    text = "\n".join(describe_ray_plan(_config(cartpole_config, "cluster.weight_sync=broadcast"), ["CartPole-v1"] * 2))
    assert "collect calls: Ray calls" in text


@pytest.mark.ray
def test_a_diverged_learner_on_the_line_stops_the_run_with_the_cli_message(ray_cluster, tmp_path, monkeypatch, capsys):
    """A NonFiniteError raised in the learner actor during collect_and_learn reaches the driver as itself, in
    learn() (after the rollout was recorded, as over Ray calls): exit 1, the iteration and its env steps named,
    no traceback."""
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
