"""Kill-loop harness: SIGKILL a real ``rlightning train`` at random moments, resume, and check nothing is lost.

Each trial trains a small CartPole PPO run that checkpoints every iteration, kills it with SIGKILL either at a
random moment after its first checkpoint or the moment a checkpoint temp file appears (a kill during the write),
then checks that

1. every ``ckpt-*.pt`` left in the checkpoint directory loads (no half-written file under a final name);
2. ``rlightning train --resume RUN_DIR`` finishes the run (exit 0, all ``engine.total_steps`` done);
3. every checkpoint then loads, and the final parameters equal, bit for bit, those of one uninterrupted
   reference run with the same config (local mode is deterministic for a seed, resume included).

Run it directly (``python tests/reliability/killloop.py --trials 20``; the ``killloop`` nox session does) or
through ``test_killloop.py`` (a few trials in the default suite).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reliability_helpers import CARTPOLE, RLIGHTNING, ROOT, child_env

#: Big enough that a checkpoint write takes a measurable share of the time (a kill can land inside one).
OVERRIDES = ("engine.total_steps=6144", "engine.eval_every=0", "engine.eval_episodes=1",
             "engine.target_eval_return=null", "logging.progress=false", "env[0].num_envs=4",
             "engine.params.rollout_steps=32", "policy.params.hidden_sizes=[256,256]", "checkpoint.every=1",
             "checkpoint.keep_last=2", "seed=3")


@attrs.define
class Trial:
    """What one trial saw."""

    index: int
    mode: str
    """``random`` (a random moment after the first checkpoint) or ``write`` (as soon as a temp file appears)."""
    killed_after_s: float = 0.0
    mid_write: bool = False
    """A checkpoint or index temp file was present after the kill: the kill landed inside a write."""
    checkpoints_after_kill: int = 0
    resumed_from_iteration: int | None = None
    ok: bool = False
    problem: str = ""


def _start(run_dir: Path, extra: Sequence[str] = ()) -> subprocess.Popen[str]:
    return subprocess.Popen([str(RLIGHTNING), "train", str(CARTPOLE), *OVERRIDES, *extra, "--run-dir",
                             str(run_dir)], env=child_env(), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _temp_files(ckpt_dir: Path) -> list[str]:
    try:
        return [e.name for e in os.scandir(ckpt_dir) if e.name.endswith(".tmp")]
    except FileNotFoundError:
        return []


def _ckpts(ckpt_dir: Path) -> list[Path]:
    return sorted(ckpt_dir.glob("ckpt-*.pt")) if ckpt_dir.is_dir() else []


def _check_all_load(ckpt_dir: Path) -> str:
    """Empty when every checkpoint file loads; else what failed."""
    from rlightning_core.checkpoint.manager import load_checkpoint

    for path in _ckpts(ckpt_dir):
        try:
            load_checkpoint(path)
        except Exception as exc:  # any failure is the finding
            return f"{path.name} does not load: {exc}"
    return ""


def final_params(run_dir: Path) -> dict[str, object]:
    """The learner's tensors in the run's latest checkpoint, and its step count."""
    from rlightning_core.checkpoint.manager import load_checkpoint, resolve_checkpoint

    state, _ = load_checkpoint(resolve_checkpoint(run_dir))
    return {"env_steps": state["engine"]["env_steps"], "learner": state["policy"]["learner"]}


def _same(a: object, b: object) -> bool:
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return isinstance(b, list | tuple) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def reference_run(root: Path) -> dict[str, object]:
    """One uninterrupted run with the same config: what every resumed trial must reproduce."""
    run_dir = root / "reference"
    proc = _start(run_dir)
    _, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the reference run failed ({proc.returncode}): {err[-2000:]}")
    return final_params(run_dir)


def run_trial(index: int, root: Path, reference: dict[str, object], rng: random.Random) -> Trial:
    """Start, SIGKILL, check, resume, check."""
    mode = "write" if index % 2 else "random"
    trial = Trial(index=index, mode=mode)
    run_dir = root / f"trial-{index:03d}"
    ckpt_dir = run_dir / "checkpoints"
    proc = _start(run_dir)
    t0 = time.monotonic()
    deadline = t0 + 300
    delay = rng.uniform(0.0, 2.5)
    first_ckpt_at: float | None = None
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            now = time.monotonic()
            if first_ckpt_at is None and _ckpts(ckpt_dir):
                first_ckpt_at = now
            if first_ckpt_at is not None:
                if mode == "write" and _temp_files(ckpt_dir):
                    break
                if (mode == "random" or now - first_ckpt_at > 6.0) and now - first_ckpt_at >= delay:
                    break
            time.sleep(0.0005 if first_ckpt_at is not None else 0.05)
        if proc.poll() is not None:
            trial.problem = f"the run ended (exit {proc.returncode}) before it could be killed"
            return trial
        os.killpg(proc.pid, signal.SIGKILL)
        trial.killed_after_s = time.monotonic() - t0
    finally:
        proc.wait(timeout=60)
        if proc.stderr is not None:
            proc.stderr.close()
    trial.mid_write = bool(_temp_files(ckpt_dir))
    trial.checkpoints_after_kill = len(_ckpts(ckpt_dir))
    problem = _check_all_load(ckpt_dir)
    if problem:
        trial.problem = f"after the kill: {problem}"
        return trial
    from rlightning_core.checkpoint.manager import CheckpointManager

    latest = CheckpointManager(ckpt_dir).latest()
    if latest is None:
        trial.problem = "no loadable checkpoint after the kill"
        return trial
    trial.resumed_from_iteration = int(latest.name[5:13])
    resumed = subprocess.run([str(RLIGHTNING), "train", str(CARTPOLE), *OVERRIDES, "--resume", str(run_dir)],
                             env=child_env(), cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    if resumed.returncode != 0:
        trial.problem = f"resume failed ({resumed.returncode}): {resumed.stderr[-1500:]}"
        return trial
    problem = _check_all_load(ckpt_dir)
    if problem:
        trial.problem = f"after the resume: {problem}"
        return trial
    final = final_params(run_dir)
    if final["env_steps"] != reference["env_steps"]:
        trial.problem = f"resumed run stopped at {final['env_steps']} env steps, not {reference['env_steps']}"
    elif not _same(final["learner"], reference["learner"]):
        trial.problem = "resumed run's final parameters differ from the uninterrupted run's"
    else:
        trial.ok = True
    return trial


def kill_loop(trials: int, root: Path, seed: int = 0, log: bool = True) -> list[Trial]:
    """Run ``trials`` trials under ``root``; returns what each saw."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    reference = reference_run(root)
    out = []
    for i in range(trials):
        trial = run_trial(i, root, reference, rng)
        out.append(trial)
        if log:
            state = "ok" if trial.ok else f"FAILED: {trial.problem}"
            print(f"trial {i:3d} [{trial.mode:6s}] killed at {trial.killed_after_s:5.2f}s, mid-write "
                  f"{'yes' if trial.mid_write else 'no ':3s}, {trial.checkpoints_after_kill} ckpt(s), resumed from "
                  f"iteration {trial.resumed_from_iteration}: {state}", flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python tests/reliability/killloop.py [--trials N] [--root DIR] [--seed S]``; exit 1 on any failure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--root", type=Path, default=None, help="where the runs go (default: a temp dir)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import tempfile

    with tempfile.TemporaryDirectory(prefix="rl-killloop-") as tmp:
        root = args.root or Path(tmp)
        t0 = time.monotonic()
        results = kill_loop(args.trials, root, args.seed)
        failed = [t for t in results if not t.ok]
        mid = sum(t.mid_write for t in results)
        print(f"{len(results) - len(failed)}/{len(results)} trials recovered ({mid} killed inside a checkpoint "
              f"write) in {time.monotonic() - t0:.0f}s: {'PASS' if not failed else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
