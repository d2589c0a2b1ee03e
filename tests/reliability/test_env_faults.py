"""Env faults: a worker whose ``step``/``reset`` raises, hangs past ``env.step_timeout_s`` or returns NaN
observations is recreated (its episodes in flight dropped and counted), training continues, and past
``cluster.max_restarts`` the run stops with a message naming the env config, the worker, the error and the last
actions. The deliberately faulty env of tests/fixtures/faulty_env_plugin.py, installed as a real distribution."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
from reliability_helpers import CARTPOLE, ROOT, SMALL, run_cli

pytestmark = pytest.mark.slow

LABEL = "CartPole-v1"


@pytest.fixture
def faulty_plugins(faulty_site: Path, monkeypatch: pytest.MonkeyPatch, training_plugins: None):
    """The faulty env plugin on sys.path and loaded with every installed plugin, as this process's plugin set."""
    from rlightning_core.plugins import load_plugins, reset_plugins

    monkeypatch.syspath_prepend(str(faulty_site))
    importlib.invalidate_caches()
    plugins = load_plugins()
    assert "faulty" in plugins.registry.names("env")
    reset_plugins(plugins)
    yield plugins
    sys.modules.pop("rlightning_test_faulty", None)


def _faulty(mode: str, tmp_path: Path, *, faults: int | None = 1, at: int = 5, extra: tuple[str, ...] = ()):
    count = f"env[0].params.count_dir={tmp_path / 'faults'}" if faults is not None else "env[0].params.count_dir=null"
    return (*SMALL, "env[0].type=faulty", f"env[0].params.mode={mode}", f"env[0].params.fail_at_step={at}",
            f"env[0].params.faults={'null' if faults is None else faults}", count, "checkpoint.every=0", *extra)


def _train(tmp_path: Path, overrides: tuple[str, ...]):
    from rlightning_core import load_config
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

    config = load_config(CARTPOLE, list(overrides))
    env_group = build_env_group(config.env, seed=config.seed)
    try:
        engine = build_engine(config, env_group, build_policy_group(config.policy.type, config.policy,
                                                                     config.cluster),
                              build_data_buffer(config.buffer.type, config.buffer))
        result = engine.run(tmp_path / "run")
    finally:
        env_group.close()
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    return result, [r for r in rows if "iteration" in r]


@pytest.mark.parametrize("mode", ["raise_step", "raise_reset", "nan_obs"])
def test_a_failing_worker_is_recreated_and_training_continues(tmp_path, faulty_plugins, mode):
    result, rows = _train(tmp_path, _faulty(mode, tmp_path, faults=2))
    assert result.stop_reason == "total_steps" and result.env_steps == 1024
    assert rows[-1][f"env/{LABEL}/restarts"] == 2.0
    assert rows[-1][f"env/{LABEL}/dropped_episodes"] == 8.0  # 2 restarts x 4 envs in flight
    assert len(list((tmp_path / "faults").iterdir())) == 2


def test_a_hung_worker_is_killed_after_the_step_timeout_and_recreated(tmp_path, faulty_plugins, caplog):
    # the hang (an hour) outlasts any run: finishing with one restart means the timeout cut it short
    with caplog.at_level("WARNING", logger="rlightning"):
        result, rows = _train(tmp_path, _faulty("hang", tmp_path, extra=("env[0].step_timeout_s=1.5",
                                                                          "env[0].params.hang_s=3600")))
    assert result.stop_reason == "total_steps"
    assert rows[-1][f"env/{LABEL}/restarts"] == 1.0
    assert "step() did not return within 1.5s (env.step_timeout_s)" in caplog.text, caplog.text


def test_step_timeout_workers_run_in_child_processes_that_close(faulty_plugins):
    from rlightning_core import load_config
    from rlightning_core.env.group import build_env_group

    config = load_config(CARTPOLE, ["env[0].step_timeout_s=5", "env[0].num_workers=2"])
    group = build_env_group(config.env, seed=0)
    pids = [w.pid for w in group.workers]
    assert all(pids) and len(set(pids)) == 2
    obs = group.reset(seed=0)
    assert obs[0].shape == (8, 4)
    group.close()
    assert all(not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
               for pid in pids)


def test_past_max_restarts_the_run_stops_with_a_clear_message(tmp_path, faulty_site, training_plugins):
    overrides = _faulty("raise_step", tmp_path, faults=None, at=3, extra=("cluster.max_restarts=2",))
    proc = run_cli(["train", str(CARTPOLE), *overrides, "--run-dir", str(tmp_path / "run")],
                   pythonpath=str(faulty_site))
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr
    assert "Traceback" not in err
    assert f"env[0] ({LABEL}, type 'faulty') worker 0" in err
    assert "cluster.max_restarts=2 worker restarts are used up" in err
    assert "failed in step() with actions" in err and "failed on purpose" in err
    assert err.count("recreating the worker") == 2


@pytest.mark.ray
def test_ray_mode_past_max_restarts_stops_with_the_same_error(tmp_path, faulty_site, training_plugins):
    """An env actor failing past cluster.max_restarts ends a Ray run with the message local mode gives."""
    pytest.importorskip("ray")
    overrides = _faulty("raise_step", tmp_path, faults=None, at=3,
                        extra=("cluster.max_restarts=1", "cluster.mode=ray", "cluster.num_cpus=2"))
    proc = run_cli(["train", str(CARTPOLE), *overrides, "--run-dir", str(tmp_path / "run")],
                   pythonpath=str(faulty_site), timeout=600)
    assert proc.returncode == 1, proc.stderr
    err = proc.stderr
    assert "Traceback" not in err
    assert (f"env[0] ({LABEL}, type 'faulty') worker 0 failed and cluster.max_restarts=1 worker restarts are "
            "used up, so the run stops (the last checkpoint is intact). Last failure:") in err, err
    assert "failed on purpose" in err


class _PoleBalancer:
    """A deterministic CartPole controller (push towards the side the pole leans to): evaluation needs no training."""

    def act(self, obs, deterministic=False):
        import numpy as np

        from rlightning_core.policy.base import PolicyOutput

        return PolicyOutput(actions=(obs[:, 2] + 0.5 * obs[:, 3] > 0).astype(np.int64))


def _eval_cfg(tmp_path, mode, faults, step_timeout_s=None):
    from rlightning_core import load_config

    extra = [f"env[0].step_timeout_s={step_timeout_s}"] if step_timeout_s else []
    return load_config(CARTPOLE, ["env[0].type=faulty", f"env[0].params.mode={mode}", "env[0].params.fail_at_step=7",
                                  f"env[0].params.faults={'null' if faults is None else faults}",
                                  f"env[0].params.count_dir={tmp_path / 'faults'}", "env[0].params.hang_s=3600",
                                  *extra]).env


@pytest.mark.parametrize("mode", ["raise_step", "raise_reset", "hang"])
def test_a_failing_eval_env_is_recreated_and_the_evaluation_is_the_one_without_the_failure(tmp_path, faulty_plugins,
                                                                                            mode):
    """The failed config's evaluation runs again from its seed on a fresh worker: the same returns as no fault."""
    from rlightning_core.engine.evaluation import Evaluator

    policy = _PoleBalancer()
    clean = Evaluator(_eval_cfg(tmp_path, mode, 0), policy, episodes=3, seed=4, max_restarts=2)  # type: ignore[arg-type]
    faulty = Evaluator(_eval_cfg(tmp_path, mode, 1, 1.0 if mode == "hang" else None), policy, episodes=3,  # type: ignore[arg-type]
                       seed=4, max_restarts=2)
    try:
        want = clean.evaluate()
        got = faulty.evaluate()  # a hang (an hour) outlasts the test: a restart means the timeout cut it short
        assert got.pop("eval/env_restarts") == 1.0 and "eval/env_restarts" not in want
        assert got == want and faulty.restarts == 1
        assert len(list((tmp_path / "faults").iterdir())) == 1
        assert "eval/env_restarts" not in faulty.evaluate()  # per evaluation: none the next time
    finally:
        clean.close()
        faulty.close()


def test_past_max_restarts_a_failing_eval_env_stops_the_run_with_a_clear_message(tmp_path, faulty_plugins):
    from rlightning_core.engine.evaluation import Evaluator
    from rlightning_core.errors import RestartsUsedUpError

    evaluator = Evaluator(_eval_cfg(tmp_path, "raise_step", None), _PoleBalancer(), episodes=2, seed=4,  # type: ignore[arg-type]
                          max_restarts=2)
    try:
        with pytest.raises(RestartsUsedUpError) as info:
            evaluator.evaluate()
    finally:
        evaluator.close()
    message = str(info.value)
    assert f"eval env worker '{LABEL}' (env[0])" in message
    assert "cluster.max_restarts=2 worker restarts are used up" in message and "failed on purpose" in message
    assert evaluator.restarts == 2


RAY_CONFIG = """
seed: 1
env:
  - type: faulty
    name: raises
    params: {{mode: raise_step, fail_at_step: 5, faults: 1, count_dir: {dir}/raises, close_dir: {dir}/closed-raises}}
    num_envs: 2
  - type: faulty
    name: hangs
    params: {{mode: hang, fail_at_step: 5, faults: 1, count_dir: {dir}/hangs, hang_s: 600,
              close_dir: {dir}/closed-hangs, close_hang_s: 600}}
    num_envs: 2
    step_timeout_s: 1
policy: {{type: ppo, params: {{epochs: 1, minibatch_size: 64}}}}
engine: {{type: sync, params: {{rollout_steps: 8}}, total_steps: 256, eval_every: 0, eval_episodes: 1}}
cluster: {{mode: ray, num_cpus: 3, max_restarts: 2, close_timeout_s: 3, num_learners: {num_learners}}}
checkpoint: {{every: 0}}
logging: {{progress: false}}
"""


@pytest.mark.ray
@pytest.mark.parametrize("num_learners", [1, 0], ids=["learner-actor", "learner-in-driver"])
def test_ray_mode_recreates_failed_env_actors_and_leaves_no_process(tmp_path, faulty_site, training_plugins,
                                                                     num_learners):
    """An env actor whose env raises and one that hangs past step_timeout_s are killed and recreated; the run
    finishes, counts both, and no Ray process of its session outlives it. Envs are closed: the one that raised
    before its actor is replaced, every actor's at the end; a close() that hangs is cut off after
    cluster.close_timeout_s with a warning. With the learner in the driver they are handled the same way."""
    import subprocess

    from reliability_helpers import RLIGHTNING, child_env, kill_session, wait_for_no_session_processes

    pytest.importorskip("ray")
    config = tmp_path / "ray_faults.yaml"
    config.write_text(RAY_CONFIG.format(dir=tmp_path, num_learners=num_learners))
    proc = subprocess.Popen([str(RLIGHTNING), "train", str(config), "--run-dir", str(tmp_path / "run")],
                            env=child_env(str(faulty_site)), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        assert err.count("recreating it") == 2, err
        rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
        last = [r for r in rows if "iteration" in r][-1]
        for label in ("raises", "hangs"):
            assert last[f"env/{label}/restarts"] == 1.0 and last[f"env/{label}/dropped_episodes"] == 2.0
        # the driver closes its evaluation envs too; the env actors' processes are the others
        closed = sorted(p.name for p in (tmp_path / "closed-raises").iterdir() if p.name != f"closed-0-{proc.pid}")
        assert len(closed) == 2, closed  # the actor replaced after the error, and its replacement at the end
        assert not list((tmp_path / "closed-hangs").glob("*")), "its close() hangs (the first one was killed)"
        assert "env[1] (hangs) worker 0: close() did not finish within cluster.close_timeout_s=3s" in err, err
        left = wait_for_no_session_processes(proc.pid, 120)
        assert left == [], f"processes left after the run: {left}"
    finally:
        kill_session(proc.pid)


def test_faulty_fixture_is_a_conforming_env_when_it_does_not_fault(faulty_plugins):
    from rlightning_core.testing import check_env

    report = check_env("faulty", {"fail_worker": 7})
    assert report is not None
    assert ROOT.exists()


def test_fault_handling_settings_may_change_when_resuming():
    """Raising a timeout or the restart budget (or switching nan_policy) keeps a checkpoint resumable."""
    from rlightning_core import load_config
    from rlightning_core.run import config_hash

    def digest(*overrides: str) -> str:
        return config_hash(load_config(CARTPOLE, list(overrides), resolve=False))

    base = digest()
    assert base == digest("env[0].step_timeout_s=3", "policy.nan_policy=skip", "cluster.max_restarts=9")
    assert base != digest("env[0].num_envs=3")
