"""``rlightning sweep``: local Optuna sweeps (summary, resume, re-queue), bad space keys, and ``--ray`` on Tune."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.usefixtures("training_plugins")

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE = ROOT / "examples" / "cartpole_ppo.yaml"
#: A tiny budget: 4 iterations of 256 env steps, an evaluation of 2 episodes every 2 iterations.
TINY = ["engine.total_steps=1024", "engine.eval_every=2", "engine.eval_episodes=2", "logging.progress=false",
        "logging.level=WARNING", "checkpoint.every=0"]
SPACE = {
    "params": {
        "policy.params.lr": {"type": "log_uniform", "low": 1.0e-3, "high": 1.0e-2},
        "policy.params.epochs": {"type": "int", "low": 1, "high": 3},
        "policy.params.minibatch_size": {"type": "categorical", "choices": [64, 128]},
        "policy.params.gamma": {"type": "uniform", "low": 0.95, "high": 0.99},
    },
    "pruner": {"type": "median", "n_startup_trials": 1},
    "sampler": {"n_startup_trials": 2},
}


@pytest.fixture
def space_file(tmp_path: Path) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(SPACE))
    return path


def _space(path: Path):
    from rlightning_core.sweep.space import load_space

    return load_space(path)


def _summary(sweep_dir: Path) -> list[dict[str, str]]:
    with (sweep_dir / "summary.csv").open() as f:
        return list(csv.DictReader(f))


def _saved_params(run_dir: Path) -> dict:
    return yaml.safe_load((run_dir / "config.yaml").read_text())["policy"]["params"]


def _check_trial_runs(rows: list[dict[str, str]], *, statuses: tuple[str, ...] = ("COMPLETE", "PRUNED")) -> None:
    """Each trial is a normal run dir whose saved config holds the trial's values and whose metric is its last.

    The metric is checked against the run's metrics file for trials of ``statuses`` (Tune ends a pruned trial's
    actor, so its last lines may not have reached the file).
    """
    for row in rows:
        run_dir = Path(row["run_dir"])
        saved = _saved_params(run_dir)
        assert saved["lr"] == pytest.approx(float(row["policy.params.lr"]))
        assert saved["epochs"] == int(row["policy.params.epochs"])
        assert saved["minibatch_size"] == int(row["policy.params.minibatch_size"])
        if row["status"] not in statuses:
            continue
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        evals = [r["eval/episode_return_mean"] for r in map(json.loads, lines) if "eval/episode_return_mean" in r]
        assert float(row["eval/episode_return_mean"]) == pytest.approx(evals[-1])


def test_local_sweep_writes_a_summary_of_every_trial(tmp_path, space_file, rlightning_cli):
    sweep_dir = tmp_path / "sweep"
    r = rlightning_cli(["sweep", str(CARTPOLE), *TINY, "--space", str(space_file), "--trials", "4",
                        "--sweep-dir", str(sweep_dir)], timeout=600)
    assert r.returncode == 0, r.output
    rows = _summary(sweep_dir)
    assert [int(x["trial"]) for x in rows] == [0, 1, 2, 3]
    assert {x["status"] for x in rows} <= {"COMPLETE", "PRUNED"} and rows[0]["status"] == "COMPLETE"
    assert [Path(x["run_dir"]).name for x in rows] == ["trial_0000", "trial_0001", "trial_0002", "trial_0003"]
    _check_trial_runs(rows)
    md = (sweep_dir / "summary.md").read_text()
    assert md.count("\n| ") == 5 and "(best)" in md  # a header and 4 rows
    assert (sweep_dir / "summary.png").read_bytes()[:4] == b"\x89PNG"
    assert (sweep_dir / "study.db").is_file()


def test_a_rerun_continues_the_study_and_runs_only_the_missing_trials(tmp_path, space_file):
    from rlightning_core.sweep.local import run_local_sweep

    sweep_dir, space = tmp_path / "sweep", _space(space_file)
    first = run_local_sweep(CARTPOLE, space, sweep_dir, trials=2, overrides=TINY)
    assert [r.number for r in first] == [0, 1]
    mtimes = {r.number: (Path(r.run_dir) / "metrics.jsonl").stat().st_mtime_ns for r in first}
    second = run_local_sweep(CARTPOLE, space, sweep_dir, trials=4, overrides=TINY)
    assert [r.number for r in second] == [0, 1, 2, 3]
    assert all(r.status in ("COMPLETE", "PRUNED") for r in second)
    # the first two trials were not run again: same values, run files untouched
    assert [r.params for r in second[:2]] == [r.params for r in first]
    assert {n: (Path(second[n].run_dir) / "metrics.jsonl").stat().st_mtime_ns for n in (0, 1)} == mtimes
    assert not (sweep_dir / "trial_0004").exists()


def test_a_trial_left_running_by_a_kill_is_requeued(tmp_path, space_file):
    import optuna

    from rlightning_core.sweep.local import distribution, run_local_sweep

    sweep_dir, space = tmp_path / "sweep", _space(space_file)
    sweep_dir.mkdir()
    study = optuna.create_study(study_name="sweep", storage=f"sqlite:///{sweep_dir / 'study.db'}",
                                direction="maximize")
    killed = study.ask({p.key: distribution(optuna, p) for p in space.params})  # started, never told: RUNNING
    rows = run_local_sweep(CARTPOLE, space, sweep_dir, trials=1, overrides=TINY)
    assert [(r.number, r.status) for r in rows] == [(0, "INTERRUPTED"), (1, "COMPLETE")]
    assert rows[1].params == killed.params  # the same values, queued again
    assert _saved_params(Path(rows[1].run_dir))["lr"] == pytest.approx(killed.params["policy.params.lr"])
    states = [t.state for t in optuna.load_study(study_name="sweep",
                                                 storage=f"sqlite:///{sweep_dir / 'study.db'}").trials]
    assert states == [optuna.trial.TrialState.FAIL, optuna.trial.TrialState.COMPLETE]


def test_an_unknown_space_key_is_a_config_error_with_did_you_mean(tmp_path, rlightning_cli):
    bad = {"params": {"policy.params.lrr": {"type": "log_uniform", "low": 1e-4, "high": 1e-2},
                      "engine.total_step": {"type": "int", "low": 100, "high": 200}}}
    space = tmp_path / "bad.yaml"
    space.write_text(yaml.safe_dump(bad))
    r = rlightning_cli(["sweep", str(CARTPOLE), "--space", str(space), "--trials", "2",
                        "--sweep-dir", str(tmp_path / "sweep")])
    assert r.returncode == 2, r.output
    assert "policy.params.lrr: unknown key (did you mean 'lr'?)" in r.output
    assert "engine.total_step: unknown key (did you mean 'total_steps'?)" in r.output
    assert str(space) in r.output and "Traceback" not in r.output
    assert not (tmp_path / "sweep").exists()  # nothing started


def test_a_malformed_space_file_names_the_problem(tmp_path, rlightning_cli):
    space = tmp_path / "bad.yaml"
    space.write_text(yaml.safe_dump({"params": {"policy.params.lr": {"type": "loguniform", "low": 1, "high": 2},
                                                "policy.params.gamma": {"type": "uniform", "low": 0.99,
                                                                        "high": 0.9}}}))
    r = rlightning_cli(["sweep", str(CARTPOLE), "--space", str(space), "--trials", "2",
                        "--sweep-dir", str(tmp_path / "sweep")])
    assert r.returncode == 2, r.output
    assert "params.policy.params.lr.type: expected one of log_uniform, uniform, int, categorical" in r.output
    assert "params.policy.params.gamma: low (0.99) must be below high (0.9)" in r.output


def test_ray_sweep_runs_tune_trials_with_the_same_summary(tmp_path, space_file, ray_cluster):
    pytest.importorskip("ray.tune")
    from rlightning_core.sweep.summary import write_summary
    from rlightning_core.sweep.tune import run_tune_sweep

    sweep_dir = tmp_path / "sweep"
    rows = run_tune_sweep(CARTPOLE, _space(space_file), sweep_dir, trials=4, overrides=TINY)
    assert ray_cluster.is_initialized()  # the session's cluster is reused and left running
    write_summary(sweep_dir, rows, metric="eval/episode_return_mean", direction="maximize")
    summary = _summary(sweep_dir)
    assert sorted(int(x["trial"]) for x in summary) == [0, 1, 2, 3]
    assert {x["status"] for x in summary} <= {"COMPLETE", "PRUNED"}
    assert any(x["status"] == "COMPLETE" for x in summary)
    _check_trial_runs(summary, statuses=("COMPLETE",))
    assert (sweep_dir / "summary.png").is_file() and (sweep_dir / "tune").is_dir()


def test_a_killed_sweep_resumes_with_the_killed_trial_queued_again(tmp_path, space_file, cli_environment):
    """SIGKILL during the first trial (once its run has logged), then the same sweep again with a tiny budget."""
    import signal
    import subprocess
    import sys
    import time

    import optuna

    sweep_dir = tmp_path / "sweep"
    exe = Path(sys.executable).parent / "rlightning"
    args = [str(exe), "sweep", str(CARTPOLE), "--space", str(space_file), "--trials", "2", "--sweep-dir",
            str(sweep_dir)]
    long = ["engine.total_steps=10000000", "engine.target_eval_return=null", "logging.progress=false"]
    proc = subprocess.Popen([*args, *long], env=cli_environment(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        metrics = sweep_dir / "trial_0000" / "metrics.jsonl"
        while proc.poll() is None and not (metrics.is_file() and metrics.read_text().strip()):
            time.sleep(0.05)  # waiting for the event (the run's first metrics row), not for a time
        assert proc.poll() is None, "the sweep ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    storage = f"sqlite:///{sweep_dir / 'study.db'}"
    killed = optuna.load_study(study_name="sweep", storage=storage).trials
    assert [t.state for t in killed] == [optuna.trial.TrialState.RUNNING]
    r = subprocess.run([*args, *TINY], env=cli_environment(), capture_output=True, text=True, timeout=600,
                       check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = _summary(sweep_dir)
    assert [(x["trial"], x["status"]) for x in rows][:2] == [("0", "INTERRUPTED"), ("1", "COMPLETE")]
    assert len(rows) == 3 and rows[2]["status"] in ("COMPLETE", "PRUNED")
    assert float(rows[1]["policy.params.lr"]) == pytest.approx(killed[0].params["policy.params.lr"])
