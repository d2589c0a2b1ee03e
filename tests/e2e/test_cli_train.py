"""The training CLI as a user runs it: subprocesses, real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE = str(ROOT / "examples" / "cartpole_ppo.yaml")


def rl(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_")}
    return subprocess.run([sys.executable, "-m", "rlightning_cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT, check=False)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    from rlightning_core.plugins import get_plugins

    names = get_plugins().registry
    if "gymnasium" not in names.names("env") or "ppo" not in names.names("policy"):
        pytest.skip("needs the rlightning-gymnasium and rlightning-ppo plugins installed")
    run_dir = tmp_path_factory.mktemp("cli") / "run"
    proc = rl("train", CARTPOLE, "engine.total_steps=1024", "engine.eval_every=2", "engine.eval_episodes=3",
              "checkpoint.every=2", "--run-dir", str(run_dir))
    return run_dir, proc


def test_train_writes_a_complete_run_directory(trained_run):
    run_dir, proc = trained_run
    assert proc.returncode == 0, proc.stderr
    assert f"Run directory: {run_dir}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert (run_dir / "config.yaml").read_text().startswith("env:")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    iterations = [r for r in rows if "iteration" in r]
    assert [r["step"] for r in iterations] == [256, 512, 768, 1024]
    assert all(r["time/train_s"] > 0 for r in iterations)
    assert sum("eval/episode_return_mean" in r for r in rows) == 2
    assert {"loss/policy", "stats/approx_kl", "rollout/episode_return_mean"} <= set(iterations[-1])
    ckpts = sorted(p.name for p in (run_dir / "checkpoints").glob("ckpt-*.pt"))
    assert ckpts == ["ckpt-00000002.pt", "ckpt-00000004.pt"]


def test_eval_prints_mean_and_std(trained_run):
    run_dir, _ = trained_run
    proc = rl("eval", str(run_dir), "--episodes", "3")
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("return:"))
    mean, std = float(line.split()[2]), float(line.split()[4])
    assert mean > 0 and std >= 0
    again = rl("eval", str(run_dir / "checkpoints" / "ckpt-00000004.pt"), "--episodes", "3")
    assert again.returncode == 0 and line in again.stdout  # same checkpoint, same seeds: same numbers


def test_resume_continues_where_the_run_stopped(trained_run):
    run_dir, _ = trained_run
    proc = rl("train", CARTPOLE, "engine.total_steps=1536", "engine.eval_every=2", "engine.eval_episodes=3",
              "checkpoint.every=2", "--resume", str(run_dir))
    assert proc.returncode == 0, proc.stderr
    steps = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps[-1] == 1536 and 1280 in steps


def test_resume_with_a_different_policy_is_refused(trained_run):
    run_dir, _ = trained_run
    proc = rl("train", CARTPOLE, "policy.params.hidden_sizes=[32]", "--resume", str(run_dir))
    assert proc.returncode == 2
    assert "cannot resume" in proc.stderr and "Traceback" not in proc.stderr


def test_dry_run_prints_the_plan_without_training(tmp_path):
    proc = rl("train", CARTPOLE, "--dry-run", "--run-dir", str(tmp_path / "never"))
    if "unknown env" in proc.stderr:
        pytest.skip("needs the rlightning-gymnasium and rlightning-ppo plugins installed")
    assert proc.returncode == 0, proc.stderr
    assert "policy 'ppo' from rlightning-ppo" in proc.stdout
    assert "1 worker(s) x 8 env(s)" in proc.stdout
    assert not (tmp_path / "never").exists()


def test_bad_override_is_a_user_error(tmp_path, trained_run):
    proc = rl("train", CARTPOLE, "policy.params.lr=fast", "--run-dir", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert "policy.params.lr" in proc.stderr and "Traceback" not in proc.stderr


def test_a_cuda_device_this_machine_lacks_is_a_user_error(tmp_path, trained_run):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = rl("train", CARTPOLE, "policy.device=cuda", "--run-dir", str(tmp_path / "r"))
    assert proc.returncode == 2, proc.stderr
    assert "policy.device: 'cuda'" in proc.stderr and "sees no CUDA device" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_eval_records_one_video_per_episode(trained_run, tmp_path):
    pytest.importorskip("moviepy")
    pytest.importorskip("pygame")
    run_dir, _ = trained_run
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_")}
    env["SDL_VIDEODRIVER"] = "dummy"
    proc = subprocess.run([sys.executable, "-m", "rlightning_cli", "eval", str(run_dir), "--episodes", "2",
                           "--video", str(tmp_path / "videos")], capture_output=True, text=True, timeout=300,
                          env=env, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr
    videos = sorted((tmp_path / "videos").glob("*.mp4"))
    assert [v.name for v in videos] == ["eval-env0-episode-0.mp4", "eval-env1-episode-0.mp4"]
    assert all(v.stat().st_size > 1000 for v in videos)
