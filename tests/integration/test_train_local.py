"""End-to-end training in one process: learning, determinism, resume, loggers, library use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.usefixtures("training_plugins")


@pytest.mark.slow
def test_ppo_solves_cartpole(tmp_path, cartpole_config, build_run, learner_params):
    config = cartpole_config("engine.total_steps=80000", "checkpoint.every=0")
    result = build_run(config).run(tmp_path / "run")
    assert result.stop_reason == "target_eval_return", result
    assert result.last_eval_return >= 475
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    evals = [r["eval/episode_return_mean"] for r in rows if "eval/episode_return_mean" in r]
    assert evals[-1] >= 475 and evals[0] < 475  # it learned: the first evaluation was not yet solved
    assert all("time/train_s" in r and "step" in r for r in rows if "iteration" in r)


def test_same_seed_gives_bit_identical_parameters(tmp_path, cartpole_config, build_run, learner_params):
    overrides = ("engine.total_steps=1024", "engine.eval_every=0", "checkpoint.every=0", "checkpoint.at_end=false")
    a = build_run(cartpole_config(*overrides))
    a.run(tmp_path / "a")
    b = build_run(cartpole_config(*overrides))
    b.run(tmp_path / "b")
    pa, pb = learner_params(a), learner_params(b)
    assert pa.keys() == pb.keys()
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    c = build_run(cartpole_config(*overrides, "seed=7"))
    c.run(tmp_path / "c")
    assert not all(torch.equal(pa[k], learner_params(c)[k]) for k in pa)


def test_rollout_copy_equals_learner_after_sync(tmp_path, cartpole_config, build_run, learner_params):
    engine = build_run(cartpole_config("engine.total_steps=512", "engine.eval_every=0", "checkpoint.every=0"))
    engine.run(tmp_path / "run")
    learner = engine.policy_group.learner.net.state_dict()
    rollout = engine.policy_group.rollout.net.state_dict()
    assert all(torch.equal(learner[k], rollout[k]) for k in learner)
    assert engine.policy_group.rollout.weight_version == engine.policy_group.version


def test_resume_reproduces_uninterrupted_run(tmp_path, cartpole_config, build_run, learner_params):
    """Interrupt a run after 3 iterations (Ctrl-C), resume it with the same config: same final parameters."""
    overrides = ("engine.total_steps=2048", "engine.eval_every=0", "checkpoint.every=0")
    full = build_run(cartpole_config(*overrides))
    full.run(tmp_path / "full")

    from rlightning_core import hookimpl
    from rlightning_core.plugins import get_plugins, load_plugins

    class CtrlC:
        """Presses Ctrl-C right after iteration 3 is logged."""

        @hookimpl
        def on_metrics(self, step, metrics):
            if metrics.get("iteration") == 3:
                raise KeyboardInterrupt

    first = build_run(cartpole_config(*overrides))
    first.plugins = load_plugins(extra=[("ctrl-c", CtrlC())])
    stopped = first.run(tmp_path / "split")
    first.plugins = get_plugins()
    assert stopped.stop_reason == "interrupted" and stopped.iterations == 3

    resumed = build_run(cartpole_config(*overrides))
    result = resumed.run(tmp_path / "split", resume_from=tmp_path / "split")
    assert result.env_steps == 2048 and result.iterations == full.iteration_count
    pf, pr = learner_params(full), learner_params(resumed)
    assert all(torch.equal(pf[k], pr[k]) for k in pf)


def test_resume_refuses_a_changed_training_config(tmp_path, cartpole_config, build_run, learner_params):
    from rlightning_core.errors import UserError

    build_run(cartpole_config("engine.total_steps=256", "engine.eval_every=0")).run(tmp_path / "run")
    changed = build_run(cartpole_config("engine.total_steps=512", "policy.params.lr=0.01"))
    with pytest.raises(UserError, match="config"):
        changed.run(tmp_path / "run", resume_from=tmp_path / "run")


def test_tensorboard_logger_receives_every_metric(tmp_path, cartpole_config, build_run, learner_params):
    pytest.importorskip("rlightning_tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = cartpole_config("engine.total_steps=768", "engine.eval_every=2", "checkpoint.every=0",
                             "logging.loggers=[{type: tensorboard}]")
    build_run(config).run(tmp_path / "run")
    acc = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"loss/policy", "loss/value", "stats/approx_kl", "perf/sps", "eval/episode_return_mean"} <= tags
    steps = [e.step for e in acc.Scalars("loss/policy")]
    assert steps == [256, 512, 768]
    jsonl = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    last_loss = [r["loss/policy"] for r in jsonl if "loss/policy" in r][-1]
    assert acc.Scalars("loss/policy")[-1].value == pytest.approx(last_loss, rel=1e-6)


def test_observer_plugin_sees_the_run_lifecycle(tmp_path, cartpole_config, build_run, learner_params):
    from rlightning_core import hookimpl
    from rlightning_core.plugins import load_plugins

    calls: list[str] = []

    class Observer:
        @hookimpl
        def on_run_start(self, config, run_dir):
            calls.append("start")

        @hookimpl
        def on_metrics(self, step, metrics):
            calls.append("metrics")

        @hookimpl
        def on_checkpoint(self, path, step):
            assert path.exists()
            calls.append("checkpoint")

        @hookimpl
        def on_run_end(self, run_dir, status, error):
            calls.append(f"end:{status}")

    plugins = load_plugins(extra=[("observer", Observer())])
    config = cartpole_config("engine.total_steps=512", "engine.eval_every=0", "checkpoint.every=1")
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

    reg = plugins.registry
    engine = build_engine(config, build_env_group(config.env, seed=0, registry=reg),
                          build_policy_group("ppo", config.policy, config.cluster, registry=reg),
                          build_data_buffer("rollout", config.buffer, registry=reg), registry=reg)
    engine.plugins = plugins
    engine.run(tmp_path / "run")
    assert calls[0] == "start" and calls[-1] == "end:completed"
    assert calls.count("checkpoint") == 2 and "metrics" in calls


@pytest.mark.slow
def test_ppo_continuous_actions_solve_inverted_pendulum(tmp_path, build_run):
    pytest.importorskip("mujoco")
    from rlightning_core import load_config

    config = load_config(Path(__file__).resolve().parents[2] / "examples" / "inverted_pendulum_ppo.yaml",
                         ["logging.progress=false", "engine.total_steps=40960", "checkpoint.every=0"])
    result = build_run(config).run(tmp_path / "run")
    assert result.stop_reason == "target_eval_return", result
    assert result.last_eval_return >= 950


def test_resuming_a_finished_run_trains_nothing_more(tmp_path, cartpole_config, build_run, caplog):
    """A run killed after its last checkpoint (or resumed again once done) stops at once instead of training
    one iteration past engine.total_steps; a larger total_steps trains on."""
    import logging

    overrides = ("engine.total_steps=512", "engine.eval_every=0", "engine.target_eval_return=null",
                 "checkpoint.every=1")
    first = build_run(cartpole_config(*overrides)).run(tmp_path / "run")
    checkpoints = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("*.pt"))
    rows = (tmp_path / "run" / "metrics.jsonl").read_text()
    with caplog.at_level(logging.WARNING, logger="rlightning"):
        again = build_run(cartpole_config(*overrides)).run(tmp_path / "run", resume_from=tmp_path / "run")
    assert (again.stop_reason, again.iterations, again.env_steps) == ("total_steps", first.iterations, 512)
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("*.pt")) == checkpoints
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == rows
    assert "already meets the stop rule engine.total_steps" in caplog.text
    more = build_run(cartpole_config(*overrides[1:], "engine.total_steps=768")).run(
        tmp_path / "run", resume_from=tmp_path / "run")
    assert more.env_steps == 768 and more.iterations == first.iterations + 1


def test_time_limit_stops_the_run(tmp_path, cartpole_config, build_run):
    config = cartpole_config("engine.total_steps=10000000", "engine.time_limit_s=1.0", "engine.eval_every=0",
                             "engine.eval_episodes=2", "checkpoint.every=0")
    result = build_run(config).run(tmp_path / "run")
    assert result.stop_reason == "time_limit"
    # it stops after the first iteration that brings the training time to the limit, however long iterations take
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train_s = [r["time/train_s"] for r in rows if "iteration" in r]
    assert train_s[-1] == result.train_s >= 1.0 and all(t < 1.0 for t in train_s[:-1]), train_s
    per_iteration = config.env[0].num_envs * config.engine.params.rollout_steps
    assert result.iterations == len(train_s) and result.env_steps == result.iterations * per_iteration
    assert result.last_eval_return is not None  # a final evaluation always runs


