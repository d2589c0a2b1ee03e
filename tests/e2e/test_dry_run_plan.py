"""What ``train --dry-run`` says, as a user reads it (the run's own plan is compared in test_plan_matches_run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def dry_run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_") and k != "RAY_ADDRESS"}
    proc = subprocess.run([str(Path(sys.executable).parent / "rlightning"), "train", *args, "--dry-run"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    if "unknown" in proc.stderr and "plugin" in proc.stderr:
        pytest.skip("needs the example's plugins installed")
    assert proc.returncode == 0, proc.stderr
    return proc


def test_the_async_engine_on_ray_is_said_to_publish_through_the_object_store():
    out = dry_run("examples/pendulum_sac_ray.yaml").stdout
    assert "weight sync: object_store, published every 64 learner update(s) (one ray.put per publication) to 2 " \
           "env-runner(s), queued behind each one's current chunk" in out
    assert "broadcast" not in out


def test_weight_sync_auto_says_a_small_policy_s_weights_ride_inline():
    out = dry_run("examples/cartpole_ppo.yaml", "cluster.mode=ray").stdout
    assert "weight sync: inline (36 KiB of weights, at most 1 MiB): the learner's numpy weights ride its learn " \
           "reply to 1 env-runner(s)" in out
    assert "broadcast" not in out
    big = dry_run("examples/cartpole_ppo.yaml", "cluster.mode=ray", "policy.params.hidden_sizes=[512,512]").stdout
    assert "weight sync: broadcast over gloo, learner rank 0 -> 1 env-runner(s) (weight_sync: auto: " in big
    assert "of weights, over 1 MiB)" in big and "inline" not in big


@pytest.mark.parametrize(("overrides", "line"), [
    (("checkpoint.every=0",), "checkpoints: at the end only (checkpoint.every: 0), keep last 3 + best"),
    (("checkpoint.every=0", "checkpoint.at_end=false", "checkpoint.keep_best=false"),
     "checkpoints: only when a signal stops the run (checkpoint.every: 0, checkpoint.at_end: false), keep last 3"),
    (("checkpoint.every=5",), "checkpoints: every 5 iteration(s) and at the end, keep last 3 + best"),
])
def test_the_checkpoint_schedule_reads_as_what_happens(overrides, line):
    out = dry_run("examples/cartpole_ppo.yaml", *overrides).stdout
    assert f"  {line}\n" in out
    assert "every end" not in out
