"""SIGINT / SIGTERM stop training cleanly: the iteration in progress finishes, a final checkpoint is written,
loggers are flushed and closed, Ray actors and processes are released, and the exit code says which signal
(128 + signum: 130 for SIGINT, 143 for SIGTERM). Real ``rlightning train`` subprocesses, in local and Ray mode."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from reliability_helpers import (
    CARTPOLE,
    RLIGHTNING,
    ROOT,
    SMALL,
    child_env,
    kill_session,
    session_processes,
    wait_for_no_session_processes,
)

pytestmark = pytest.mark.slow

RAY_CONFIG = ROOT / "examples" / "cartpole_ppo_ray.yaml"
RAY_SMALL = ("engine.eval_every=0", "engine.eval_episodes=1", "engine.target_eval_return=null",
             "logging.progress=false", "env[0].num_workers=1", "env[0].num_envs=2", "cluster.num_cpus=2",
             "engine.params.rollout_steps=16")


def _start(config: Path, run_dir: Path, *overrides: str) -> subprocess.Popen[str]:
    return subprocess.Popen([str(RLIGHTNING), "train", str(config), *overrides, "--run-dir", str(run_dir)],
                            env=child_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _wait_for_rows(run_dir: Path, proc: subprocess.Popen[str], rows: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    path = run_dir / "metrics.jsonl"
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and path.read_text().count("\n") >= rows:
            return
        time.sleep(0.1)
    raise AssertionError(f"the run logged fewer than {rows} iterations in {timeout}s (exit {proc.poll()})")


def _iterations(run_dir: Path) -> list[int]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["iteration"] for line in lines if '"iteration"' in line]  # every line parses


def _stop_and_check(proc: subprocess.Popen[str], run_dir: Path, sig: signal.Signals) -> str:
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=600)
    finally:
        kill_session(proc.pid)
    assert proc.returncode == 128 + sig, err
    assert f"Stopped by {sig.name}" in err and "Traceback" not in err, err
    from rlightning_core.checkpoint.manager import CheckpointManager, load_checkpoint

    latest = CheckpointManager(run_dir / "checkpoints").latest()
    assert latest is not None, "no final checkpoint"
    state, _ = load_checkpoint(latest)
    iterations = _iterations(run_dir)
    assert state["engine"]["iteration"] == iterations[-1], "the final checkpoint is not of the last iteration"
    return err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_a_local_run_with_a_final_checkpoint(tmp_path, training_plugins, sig):
    run_dir = tmp_path / "run"
    proc = _start(CARTPOLE, run_dir, *SMALL, "engine.total_steps=10000000", "checkpoint.every=1000")
    try:
        _wait_for_rows(run_dir, proc, 3, timeout=600)
        _stop_and_check(proc, run_dir, sig)
    finally:
        kill_session(proc.pid)
    assert wait_for_no_session_processes(proc.pid, 120) == []
    # the stopped run resumes where it stopped
    done = subprocess.run([str(RLIGHTNING), "train", str(CARTPOLE), *SMALL, "engine.total_steps=10000000",
                           "checkpoint.every=1000", "engine.time_limit_s=1", "--resume", str(run_dir)],
                          env=child_env(), cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0 and "resumed from" in done.stderr, done.stderr


@pytest.mark.ray
def test_sigterm_stops_a_ray_run_and_releases_every_process(tmp_path, training_plugins):
    pytest.importorskip("ray")
    run_dir = tmp_path / "run"
    proc = _start(RAY_CONFIG, run_dir, *RAY_SMALL, "engine.total_steps=10000000", "checkpoint.every=1000")
    try:
        _wait_for_rows(run_dir, proc, 2, timeout=600)
        assert any("raylet" in cmd for _, cmd in session_processes(proc.pid)), "no Ray cluster in the run's session"
        _stop_and_check(proc, run_dir, signal.SIGTERM)
        left = wait_for_no_session_processes(proc.pid, 120)
        assert left == [], f"processes left after the run: {left}"
    finally:
        kill_session(proc.pid)
