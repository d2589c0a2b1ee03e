"""Kill-loop harness: SIGKILL a real ``rlightning train`` at random points of its progress, resume, and check
nothing is lost.

Each trial trains a small CartPole PPO run that checkpoints every iteration and kills it with SIGKILL at a
point chosen from what the run has done, never from a guessed time: once the checkpoint of a random
iteration ``k`` has appeared, either (``random``) after a random fraction of the last iteration's duration
(so the kill lands anywhere in an iteration: collecting, learning, writing a checkpoint) or (``write``) the
moment a checkpoint or index temp file appears (a kill during the write). The killed run has the test plugin
``tests/fixtures/hold_plugin.py`` hold it after the checkpoint of its last-but-one iteration, and ``k`` is at
most that iteration, so the run cannot finish before it is killed on any machine: a kill point that is not
reached before the hold is replaced by a kill during the hold. Then the harness checks that

1. every ``ckpt-*.pt`` left in the checkpoint directory loads (no half-written file under a final name);
2. ``rlightning train --resume RUN_DIR`` finishes the run (exit 0, all ``engine.total_steps`` done);
3. every checkpoint then loads, and the final parameters equal, bit for bit, those of one uninterrupted
   reference run with the same config (local mode is deterministic for a seed, resume included).

Waits are bounded by :data:`HANG_GUARD_S` only to catch a hung run; on a healthy machine of any speed the
events come first.

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
from reliability_helpers import CARTPOLE, RLIGHTNING, ROOT, child_env, write_plugin_dist

NUM_ENVS, ROLLOUT_STEPS = 4, 32
STEPS_PER_ITERATION = NUM_ENVS * ROLLOUT_STEPS
ITERATIONS = 48
"""Iterations of a whole run (one checkpoint each)."""
HOLD_ITERATION = ITERATIONS - 1
"""A killed run is held after this iteration's checkpoint: the latest kill point, so the resume has work left."""
#: A network big enough that a checkpoint write takes a measurable share of the time (a kill can land inside one).
OVERRIDES = (f"engine.total_steps={ITERATIONS * STEPS_PER_ITERATION}", "engine.eval_every=0",
             "engine.eval_episodes=1", "engine.target_eval_return=null", "logging.progress=false",
             f"env[0].num_envs={NUM_ENVS}", f"engine.params.rollout_steps={ROLLOUT_STEPS}",
             "policy.params.hidden_sizes=[256,256]", "checkpoint.every=1", "checkpoint.keep_last=2", "seed=3")
HANG_GUARD_S = 900.0
"""The longest any one wait may take: it only turns a hung run into a failure instead of a hung harness."""
HOLD_PLUGIN = ROOT / "tests" / "fixtures" / "hold_plugin.py"


@attrs.define
class Trial:
    """What one trial saw."""

    index: int
    mode: str
    """``random`` (anywhere in the iteration after ``target_iteration``) or ``write`` (as a temp file appears)."""
    target_iteration: int = 0
    """The iteration whose checkpoint has to appear before the kill."""
    killed_after_s: float = 0.0
    killed_at_iteration: int = 0
    """The latest checkpoint's iteration when the kill was sent."""
    held: bool = False
    """The kill landed while the hold plugin held the run (its kill point had not come before)."""
    mid_write: bool = False
    """A checkpoint or index temp file was present after the kill: the kill landed inside a write."""
    checkpoints_after_kill: int = 0
    resumed_from_iteration: int | None = None
    ok: bool = False
    problem: str = ""


def _train_args(run_dir: Path, *, resume: bool = False) -> list[str]:
    """The ``rlightning train`` command line of a run of the harness (fresh, or resuming ``run_dir``)."""
    return [str(RLIGHTNING), "train", str(CARTPOLE), *OVERRIDES, "--resume" if resume else "--run-dir",
            str(run_dir)]


def _tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except FileNotFoundError:
        return ""


def _latest_iteration(ckpt_dir: Path) -> int:
    """The highest iteration with a checkpoint under its final name (0 before the first)."""
    try:
        numbers = [e.name[5:-3] for e in os.scandir(ckpt_dir) if e.name.startswith("ckpt-") and e.name.endswith(".pt")]
    except FileNotFoundError:
        return 0
    return max((int(n) for n in numbers if n.isdigit()), default=0)


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


def install_hold_plugin(root: Path) -> Path:
    """Install the hold plugin into ``root/site`` (a ``PYTHONPATH`` entry) and return that folder.

    Every run of the harness has it installed, so the reference, killed and resumed runs load the same
    plugins; only a killed run has it hold (its ``RLIGHTNING_TEST_HOLD_*`` variables set).
    """
    return write_plugin_dist(root / "site", "rlightning-test-hold", "rlightning_test_hold", HOLD_PLUGIN)


def reference_run(root: Path, site: Path) -> dict[str, object]:
    """One uninterrupted run with the same config: what every resumed trial must reproduce."""
    run_dir = root / "reference"
    proc = subprocess.run(_train_args(run_dir), env=child_env(str(site)), cwd=ROOT, capture_output=True,
                          text=True, timeout=HANG_GUARD_S, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"the reference run failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return final_params(run_dir)


def _kill_point(trial: Trial, proc: subprocess.Popen[bytes], ckpt_dir: Path, held: Path, fraction: float) -> str:
    """Wait for the trial's kill point (or the hold); empty when it came, else what went wrong instead."""
    t0 = time.monotonic()
    deadline = t0 + HANG_GUARD_S
    seen_at: list[float] = []  # when each new latest checkpoint was first seen
    kill_at: float | None = None
    while proc.poll() is None:
        now = time.monotonic()
        latest = _latest_iteration(ckpt_dir)
        if latest > trial.killed_at_iteration:
            trial.killed_at_iteration = latest
            seen_at.append(now)
        if held.exists():
            trial.held = True
            return ""
        if trial.killed_at_iteration >= trial.target_iteration:  # the kill point may have come
            if trial.mode == "write" and _temp_files(ckpt_dir):
                return ""
            if trial.mode == "random" and kill_at is None:
                iteration_s = seen_at[-1] - seen_at[-2] if len(seen_at) > 1 else 0.0
                kill_at = now + fraction * iteration_s
            if kill_at is not None and now >= kill_at:
                return ""
        if now > deadline:
            return f"no kill point and no hold within {HANG_GUARD_S:.0f}s: the run hangs"
        time.sleep(0.0005 if trial.killed_at_iteration else 0.05)
    return (f"the run exited ({proc.returncode}) before the hold after iteration {HOLD_ITERATION}, which no "
            "healthy run passes")


def run_trial(index: int, root: Path, site: Path, reference: dict[str, object], rng: random.Random) -> Trial:
    """Start, SIGKILL at the trial's kill point, check, resume, check."""
    mode = "write" if index % 2 else "random"
    trial = Trial(index=index, mode=mode, target_iteration=rng.randint(1, HOLD_ITERATION))
    fraction = rng.random()
    run_dir = root / f"trial-{index:03d}"
    ckpt_dir = run_dir / "checkpoints"
    held, stderr = root / f"trial-{index:03d}.held", root / f"trial-{index:03d}.stderr"
    env = child_env(str(site), RLIGHTNING_TEST_HOLD_AT_STEP=str(HOLD_ITERATION * STEPS_PER_ITERATION),
                    RLIGHTNING_TEST_HOLD_MARKER=str(held))
    t0 = time.monotonic()
    with stderr.open("wb") as err:
        proc = subprocess.Popen(_train_args(run_dir), env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)
    try:
        problem = _kill_point(trial, proc, ckpt_dir, held, fraction)
        if problem:
            trial.problem = f"{problem}: {_tail(stderr)}"
            return trial
        os.killpg(proc.pid, signal.SIGKILL)
        trial.killed_after_s = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=HANG_GUARD_S)
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
    resumed = subprocess.run(_train_args(run_dir, resume=True), env=child_env(str(site)), cwd=ROOT,
                             capture_output=True, text=True, timeout=HANG_GUARD_S, check=False)
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
    site = install_hold_plugin(root)
    reference = reference_run(root, site)
    out = []
    for i in range(trials):
        trial = run_trial(i, root, site, reference, rng)
        out.append(trial)
        if log:
            state = "ok" if trial.ok else f"FAILED: {trial.problem}"
            where = "held" if trial.held else f"after iteration {trial.killed_at_iteration}"
            print(f"trial {i:3d} [{trial.mode:6s}] killed {where} ({trial.killed_after_s:5.2f}s), mid-write "
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
        mid, held = sum(t.mid_write for t in results), sum(t.held for t in results)
        print(f"{len(results) - len(failed)}/{len(results)} trials recovered ({mid} killed inside a checkpoint "
              f"write, {held} while held) in {time.monotonic() - t0:.0f}s: {'PASS' if not failed else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
