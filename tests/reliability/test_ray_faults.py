"""Ray-mode faults at awkward moments, on a real local Ray cluster, through the ``rlightning`` CLI: an env runner
killed while a checkpoint is being taken, and two env runners hung at once under ``weight_sync: broadcast``.

The faults come from the faulty env of tests/fixtures/faulty_env_plugin.py, installed as a real distribution; each
is placed by an event (a marker file the env writes as it faults), never by a guessed time."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from reliability_helpers import RLIGHTNING, ROOT, child_env, kill_session, wait_for_no_session_processes

pytestmark = [pytest.mark.slow, pytest.mark.ray]

HANG_GUARD_S = 600.0
"""The longest a run may take: it only turns a hung run into a failure instead of a hung test."""

CHECKPOINT_KILL = """
seed: 1
env:
  - type: faulty
    name: held
    params: {{mode: hold_state_dict, fail_worker: 0, faults: 1, count_dir: {dir}/faults, hang_s: 600}}
    num_envs: 2
    num_workers: 2
policy: {{type: ppo, params: {{epochs: 1, minibatch_size: 16}}}}
engine: {{type: sync, params: {{rollout_steps: 8}}, total_steps: 96, eval_every: 0, eval_episodes: 1,
          target_eval_return: null}}
cluster: {{mode: ray, num_cpus: 3, max_restarts: 2, weight_sync: {weight_sync}}}
checkpoint: {{every: 1, keep_last: 10}}
logging: {{progress: false}}
"""
"""Three iterations of 2 workers x 2 envs x 8 steps, a checkpoint after each; worker 0's env blocks in its first
``state_dict`` (the checkpoint of iteration 1) until the test kills its actor."""


def _start(config: Path, run_dir: Path, site: Path, *, resume: bool = False) -> subprocess.Popen[str]:
    args = [str(RLIGHTNING), "train", str(config), "--resume" if resume else "--run-dir", str(run_dir)]
    return subprocess.Popen(args, env=child_env(str(site)), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _finish(proc: subprocess.Popen[str]) -> str:
    """Wait for the run to exit and for every process of its session (Ray's) to go; returns its stderr."""
    _, err = proc.communicate(timeout=HANG_GUARD_S)
    left = wait_for_no_session_processes(proc.pid, 120)
    assert left == [], f"processes left after the run: {left}"
    return err


def _wait_for_marker(path: Path, proc: subprocess.Popen[str]) -> int:
    """The process id the faulty env wrote into ``path`` as it faulted (polls until it is there)."""
    deadline = time.monotonic() + HANG_GUARD_S
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            text = path.read_text()
        except FileNotFoundError:
            text = ""
        if text.strip():
            return int(text)
        time.sleep(0.05)
    _, err = proc.communicate(timeout=60) if proc.poll() is not None else ("", "")
    raise AssertionError(f"the env never held in state_dict (exit {proc.returncode}): {err[-3000:]}")


def _iterations(run_dir: Path) -> list[dict[str, float]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "iteration" in r]


@pytest.mark.parametrize("weight_sync", ["broadcast", "object_store"])
def test_an_env_runner_killed_while_a_checkpoint_is_taken_is_recreated_and_the_checkpoint_resumes(
        tmp_path, faulty_site, training_plugins, weight_sync):
    """The checkpoint of the iteration the kill lands in is written from the surviving runner's state, with the
    killed runner's envs marked for a reseed; the runner is recreated (one restart, counted) and the run finishes.
    Resuming from that checkpoint reseeds only the killed runner's envs and finishes too."""
    from rlightning_core.checkpoint.manager import load_checkpoint

    config = tmp_path / "ckpt_kill.yaml"
    config.write_text(CHECKPOINT_KILL.format(dir=tmp_path, weight_sync=weight_sync))
    run_dir = tmp_path / "run"
    proc = _start(config, run_dir, faulty_site)
    try:
        pid = _wait_for_marker(tmp_path / "faults" / "fault-0000", proc)  # worker 0 is inside state_dict now
        os.kill(pid, signal.SIGKILL)
        err = _finish(proc)
        (tmp_path / "first.err").write_text(err)
        assert proc.returncode == 0, err
        assert "Traceback" not in err, err
        assert "env[0] (held) worker 0 died while the checkpoint was being taken" in err, err
        assert err.count("recreating it") == 1, err
        assert _iterations(run_dir)[-1]["env/held/restarts"] == 1.0
        ckpts = sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))
        assert [p.name for p in ckpts] == [f"ckpt-{i:08d}.pt" for i in (1, 2, 3)], ckpts
        states = [load_checkpoint(p)[0] for p in ckpts]  # every one loads
        held = states[0]["runners"]
        assert held[0]["worker"] is None and held[0]["obs"] is None  # the killed runner: reseed on resume
        assert held[1]["worker"] is not None  # the survivor's envs are in it
        assert all(s["runners"][0]["worker"] is not None for s in states[1:])  # the recreated runner's again
        # resume from the checkpoint taken during the kill
        for later in ckpts[1:]:
            later.unlink()
        proc = _start(config, run_dir, faulty_site, resume=True)
        err = _finish(proc)
        assert proc.returncode == 0, err
        assert "Traceback" not in err, err
        assert "resumed from" in err and "at iteration 1" in err, err
        assert "resuming with freshly reset envs" in err, err
        assert sorted(p.name for p in (run_dir / "checkpoints").glob("ckpt-*.pt"))[-1] == "ckpt-00000003.pt"
    finally:
        kill_session(proc.pid)


HUNG_PAIR = """
seed: 1
env:
  - type: faulty
    name: hangs
    params: {{mode: hang, fail_worker: null, fail_at_step: 3, faults: 2, count_dir: {dir}/faults, hang_s: 3600}}
    num_envs: 2
    num_workers: 3
    step_timeout_s: 3
policy: {{type: ppo, params: {{epochs: 1, minibatch_size: 12}}}}
engine: {{type: sync, params: {{rollout_steps: 4}}, total_steps: 72, eval_every: 0, eval_episodes: 1,
          target_eval_return: null}}
cluster: {{mode: ray, num_cpus: 4, max_restarts: {max_restarts}, weight_sync: broadcast, call_timeout_s: 120}}
checkpoint: {{every: 0}}
logging: {{progress: false}}
"""
"""Three env runners; at their third step two of them (the first two to take one of the 2 faults) block for an
hour, in the same collect. Their collect's deadline is env.step_timeout_s x (4 steps + 1) = 15 s."""

COLLECT_DEADLINE = "its collect of 4 steps did not finish within 15s (env.step_timeout_s=3 x 5 steps)"


def _hung_workers(err: str) -> set[str]:
    return set(re.findall(r"env\[0\] \(hangs\) worker (\d) failed \(" + re.escape(COLLECT_DEADLINE) + r"\)", err))


def test_two_env_runners_hung_at_once_under_broadcast_sync_are_recreated_by_their_step_deadline(
        tmp_path, faulty_site, training_plugins):
    """Both hung runners are found by their collect's step-derived deadline, recreated together, and the weight-sync
    group is re-formed without waiting on either: the run finishes. No wait ran into cluster.call_timeout_s."""
    config = tmp_path / "hung.yaml"
    config.write_text(HUNG_PAIR.format(dir=tmp_path, max_restarts=3))
    run_dir = tmp_path / "run"
    proc = _start(config, run_dir, faulty_site)
    try:
        err = _finish(proc)
        assert proc.returncode == 0, err
        assert "Traceback" not in err, err
        assert len(list((tmp_path / "faults").iterdir())) == 2  # two runners hung
        assert len(_hung_workers(err)) == 2, err  # each named, with the deadline that fired
        assert err.count("recreating it") == 2, err
        assert "cluster.call_timeout_s" not in err and "weight-sync group" not in err, err
        assert _iterations(run_dir)[-1]["env/hangs/restarts"] == 2.0
    finally:
        kill_session(proc.pid)


def test_two_hung_env_runners_past_max_restarts_stop_the_run_naming_both(tmp_path, faulty_site, training_plugins):
    """One restart left for two hung runners: the run stops at once (exit 1, no traceback) with a message naming
    both runners and the step deadline each missed, and leaves no process behind."""
    config = tmp_path / "hung.yaml"
    config.write_text(HUNG_PAIR.format(dir=tmp_path, max_restarts=1))
    proc = _start(config, tmp_path / "run", faulty_site)
    try:
        err = _finish(proc)
        assert proc.returncode == 1, err
        assert "Traceback" not in err, err
        assert "recreating it" not in err, err
        stop = [line for line in err.splitlines() if "worker restarts are used up" in line]
        assert len(stop) == 1, err
        hung = sorted(set(re.findall(r"env\[0\] \(hangs\) worker (\d): " + re.escape(COLLECT_DEADLINE), stop[0])))
        assert len(hung) == 2, stop[0]  # each with the deadline it missed
        a, b = hung
        assert (f"env[0] (hangs, type 'faulty') worker {a} and env[0] (hangs, type 'faulty') worker {b} failed and "
                "cluster.max_restarts=1 worker restarts are used up") in stop[0], stop[0]
        assert "cluster.call_timeout_s" not in err and "weight-sync group" not in err, err
    finally:
        kill_session(proc.pid)
