"""Ray mode on a real local cluster: the same config trains, weights sync bit for bit, workers recover."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("training_plugins")]

ROOT = Path(__file__).resolve().parents[2]


def ray_config(cartpole_config, *overrides):
    return cartpole_config("cluster.mode=ray", "env.num_workers=2", "env.num_envs=4", "checkpoint.every=0",
                           *overrides)


def assert_runners_match_learner(execution):
    ray = execution.ray
    learner = ray.get(execution.learner.get_weights.remote())
    for actor in execution.env_group.actors:
        weights = ray.get(actor.get_weights.remote())
        assert weights.keys() == learner.keys()
        for key in learner:
            np.testing.assert_array_equal(weights[key], learner[key])  # bit for bit
        assert ray.get(actor.weight_version.remote()) == execution.version


@pytest.mark.parametrize("strategy", ["broadcast", "object_store"])
def test_weight_sync_is_bitwise_and_versioned(ray_cluster, tmp_path, cartpole_config, build_run, strategy):
    config = ray_config(cartpole_config, f"cluster.weight_sync={strategy}", "engine.total_steps=768",
                        "engine.eval_every=0", "engine.eval_episodes=2")
    engine = build_run(config)
    execution = engine.execution
    assert execution.version == 1  # the first sync happens before any rollout
    assert_runners_match_learner(execution)
    versions = []
    for _ in range(3):
        stats = execution.collect(32)
        assert {s.steps for s in stats} == {128}
        execution.learn(0.0)
        version, metrics = execution.sync()
        versions.append(version)
        assert_runners_match_learner(execution)
        if strategy == "broadcast":
            assert metrics["sync/bytes"] > 0 and metrics["sync/buckets"] >= 1
    assert versions == [2, 3, 4]
    chunk_ref, _ = execution.env_group.actors[0].collect.options(num_returns=2).remote(4)
    assert ray_cluster.get(chunk_ref).weight_version == 4  # data carries the version it was collected with
    execution.close()


def test_ray_training_learns_and_matches_the_local_metrics_layout(ray_cluster, tmp_path, cartpole_config,
                                                                  build_run):
    config = ray_config(cartpole_config, "engine.total_steps=60000")
    result = build_run(config).run(tmp_path / "run")
    assert result.stop_reason == "target_eval_return", result
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    keys = set().union(*rows)
    assert {"loss/policy", "rollout/episode_return_mean", "sync/seconds", "env/CartPole-v1/episode_return_mean",
            "time/train_s"} <= keys
    assert ray_cluster.is_initialized()  # a cluster the run joined is left running


def test_a_killed_env_worker_is_recreated_and_training_finishes(ray_cluster, tmp_path, cartpole_config,
                                                                 build_run, kill_env_worker_at):
    config = ray_config(cartpole_config, "engine.total_steps=1536", "engine.eval_every=0",
                        "engine.eval_episodes=2")
    engine = build_run(config)
    kill_env_worker_at(engine, ray_cluster)
    result = engine.run(tmp_path / "run")
    assert result.env_steps == 1536 and result.stop_reason == "total_steps"
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    restarts = [r["fault/worker_restarts"] for r in rows if "fault/worker_restarts" in r]
    assert restarts[0] == 0 and restarts[-1] == 1
    assert engine.execution.env_group.slots[1].restarts == 1


def test_too_few_cpus_is_a_clear_config_error(ray_cluster, cartpole_config, build_run):
    from rlightning_core.errors import ConfigError

    config = ray_config(cartpole_config, "env.num_cpus=3")
    with pytest.raises(ConfigError, match="reserve 7 CPUs"):
        build_run(config)


@pytest.mark.slow
def test_ray_mode_from_the_cli(ray_cluster, tmp_path):
    """The example config as a user runs it, joining the session's cluster (no second start-up)."""
    address = ray_cluster.get_runtime_context().gcs_address
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_")}
    proc = subprocess.run(
        [sys.executable, "-m", "rlightning_cli", "train", str(ROOT / "examples" / "cartpole_ppo_ray.yaml"),
         f"cluster.address={address}", "logging.progress=false", "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=600, env=env, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Stopped (target_eval_return)" in proc.stderr
    timed = re.search(r"ray startup: ray_init (\d+\.\d+)s", proc.stderr)
    assert timed and float(timed.group(1)) > 0, proc.stderr[-3000:]  # joining the cluster took time, and shows


@pytest.mark.parametrize(("placement", "extra", "bundles"), [
    ("colocate", (), [{"CPU": 3.0}]),
    ("disaggregate", (), [{"CPU": 1.0}, {"CPU": 1.0}, {"CPU": 1.0}]),
    ("manual", ("cluster.bundles=[{CPU: 1}, {CPU: 2}]", "cluster.learner_bundle=0", "env.bundle=1"),
     [{"CPU": 1.0}, {"CPU": 2.0}]),
])
def test_placement_puts_actors_in_the_promised_bundles(ray_cluster, cartpole_config, build_run, placement, extra,
                                                        bundles, placement_groups_of):
    from ray.util import placement_group_table

    config = ray_config(cartpole_config, f"cluster.placement={placement}", *extra)
    engine = build_run(config)
    execution = engine.execution
    plan = execution.env_group.plan
    table = placement_group_table(plan.pg)
    assert [dict(b) for b in table["bundles"].values()] == bundles
    assert table["state"] == "CREATED"
    pg_id = plan.pg.id.hex()
    members = [execution.learner, *execution.env_group.actors]
    assert placement_groups_of(ray_cluster, members) == [pg_id] * 3
    # each bundle holds exactly its actors' CPUs, so Ray cannot have put two 1-CPU actors into a 1-CPU bundle
    assert plan.learner_bundle == 0
    assert plan.env_bundles == {"colocate": [0, 0], "disaggregate": [1, 2], "manual": [1, 1]}[placement]
    pg = plan.pg
    execution.close()
    assert placement_group_table(pg)["state"] == "REMOVED"


def test_a_run_resumes_with_another_number_of_env_workers_and_learners(ray_cluster, tmp_path, cartpole_config,
                                                                         build_run):
    """Scale a resumed run in: 2 env actors and a learner actor, then 1 env actor and the learner in the driver."""
    first = build_run(ray_config(cartpole_config, "engine.total_steps=512", "engine.eval_every=0",
                                 "checkpoint.at_end=true"))
    first.run(tmp_path / "run")
    from rlightning_core.checkpoint.manager import CheckpointManager, resolve_checkpoint

    state, _ = CheckpointManager.load(resolve_checkpoint(tmp_path / "run"))
    saved = {f"net.{k}": v.numpy() for k, v in state["policy"]["learner"]["modules"]["net"].items()}
    resumed = build_run(cartpole_config("cluster.mode=ray", "env.num_workers=1", "env.num_envs=4",
                                        "cluster.num_learners=0", "checkpoint.every=0", "engine.eval_every=0",
                                        "engine.total_steps=1024"))
    seen = {}
    load = resumed.execution.load_state_dict

    def load_and_look(state):
        restored = load(state)
        seen["weights"], seen["restored"] = resumed.execution.learner.target.get_weights(), restored
        return restored

    resumed.execution.load_state_dict = load_and_look
    result = resumed.run(tmp_path / "run2", resume_from=tmp_path / "run")
    assert result.env_steps == 1024 and result.stop_reason == "total_steps"
    assert seen["restored"] == [False]  # 1 env worker now, 2 saved: its envs start fresh episodes
    assert saved and seen["weights"].keys() == saved.keys()
    assert all(np.array_equal(seen["weights"][k], saved[k]) for k in saved)  # the learner continues exactly
    rows = [json.loads(x) for x in (tmp_path / "run2" / "metrics.jsonl").read_text().splitlines()]
    assert min(r["step"] for r in rows if "step" in r) > 512


def _learner_weights_at_load(engine, fetch):
    """Wrap ``engine.execution.load_state_dict`` to record the learner's weights right after a resume loads."""
    seen = {}
    load = engine.execution.load_state_dict

    def load_and_look(state):
        seen["restored"] = load(state)
        seen["weights"] = fetch(engine.execution)
        return seen["restored"]

    engine.execution.load_state_dict = load_and_look
    return seen


def _checkpoint_weights(run_dir):
    from rlightning_core.checkpoint.manager import CheckpointManager, resolve_checkpoint

    state, _ = CheckpointManager.load(resolve_checkpoint(run_dir))
    return {f"net.{k}": v.numpy() for k, v in state["policy"]["learner"]["modules"]["net"].items()}


def test_a_local_run_resumes_on_ray_and_back(ray_cluster, tmp_path, cartpole_config, build_run):
    """Prototype locally, scale out with ``cluster.mode=ray`` on resume, and come back: the learner continues."""
    common = ("env.num_envs=4", "checkpoint.every=0", "checkpoint.at_end=true", "engine.eval_every=0")
    build_run(cartpole_config(*common, "engine.total_steps=512")).run(tmp_path / "local")
    saved = _checkpoint_weights(tmp_path / "local")

    on_ray = build_run(cartpole_config(*common, "cluster.mode=ray", "env.num_workers=2", "engine.total_steps=1024"))
    seen = _learner_weights_at_load(on_ray, lambda ex: ex.ray.get(ex.learner.get_weights.remote()))
    result = on_ray.run(tmp_path / "ray", resume_from=tmp_path / "local")
    assert result.env_steps == 1024 and result.stop_reason == "total_steps"
    assert seen["restored"] == [False, False]  # 2 env actors now, 1 local worker saved: fresh episodes
    assert saved and seen["weights"].keys() == saved.keys()
    assert all(np.array_equal(seen["weights"][k], saved[k]) for k in saved)
    rows = [json.loads(x) for x in (tmp_path / "ray" / "metrics.jsonl").read_text().splitlines()]
    assert min(r["step"] for r in rows if "step" in r) > 512

    saved = _checkpoint_weights(tmp_path / "ray")
    assert not all(np.array_equal(seen["weights"][k], saved[k]) for k in saved)  # it learned on Ray
    back = build_run(cartpole_config(*common, "engine.total_steps=1536"))
    seen = _learner_weights_at_load(back, lambda ex: ex.policy_group.learner.get_weights())
    result = back.run(tmp_path / "back", resume_from=tmp_path / "ray")
    assert result.env_steps == 1536
    assert seen["restored"] == [False]
    assert all(np.array_equal(seen["weights"][k], saved[k]) for k in saved)
