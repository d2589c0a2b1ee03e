"""The standard suites: Atari Breakout from pixels and MuJoCo locomotion, rlightning beside Stable-Baselines3.

Each task trains the example config of ``examples/`` with rlightning for several seeds and SB3 with the same
hyperparameters (the mapping is in the task's ``sb3_*`` function) on the same env-step budget, evaluating both
on the same env-step schedule (deterministic actions, unclipped scores; evaluation time is off both clocks).
It prints, per task, the mean final evaluation return ± std over seeds, the published reference of
``../shared/REFERENCES.md`` where one exists, the mean training wall time and the wall ratio, and writes two
PNG curves per task (return vs env steps and vs training wall time) and a ``results.json`` into ``--out``.

The full budgets take hours on a 2-core machine: ``nox -s bench_suites`` (never the default test run);
``--quick`` shortens every budget (and the warm-up of SAC) to check the whole pipeline in a few minutes.

Every finished run of a full budget is recorded in ``benchmarks/suites/runs/TASK/`` (its curve, when it ran, the
machine's load, the library versions; committed with the repository), and ``--resume`` runs only the runs not
recorded yet: the hours of the whole suite can be spread over several invocations. The report of a task covers
every recorded run of its budget and prints when and under what load each ran.

Run: ``python benchmarks/suites/run.py [--quick] [--only TASK ...] [--seeds N] [--ref-seeds N] [--out DIR]
[--resume]``.
Needs ``stable-baselines3``, ``ale-py`` and ``mujoco`` (a task whose dependency is missing is skipped, with the
pip command). Always exits 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
Curve = list[tuple[int, float, float]]  # (env steps, training wall s, eval return)


@dataclass
class Task:
    """One comparison: an rlightning example config and the SB3 run with the same hyperparameters."""

    config: str
    env_id: str
    algo: str
    steps: int
    quick_steps: int
    seeds: int
    ref_seeds: int
    sb3: Callable[..., Curve]
    published: str = ""
    requires: tuple[str, ...] = ()
    quick_overrides: tuple[str, ...] = field(default_factory=tuple)


# -- SB3 runs ----------------------------------------------------------------------------------------------
def _eval_callback(evaluate: Callable[[Any], float], every: int) -> Any:
    """An SB3 callback that evaluates every ``every`` env steps with the training clock paused."""
    import torch
    from stable_baselines3.common.callbacks import BaseCallback

    class EvalClock(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.curve: Curve = []
            self.start = self.paused = 0.0
            self.next_eval = every

        def train_s(self) -> float:
            return time.perf_counter() - self.start - self.paused

        def record(self) -> None:
            t0 = time.perf_counter()
            train_s = t0 - self.start - self.paused
            self.curve.append((int(self.num_timesteps), train_s, float(evaluate(self.model))))
            self.paused += time.perf_counter() - t0

        def _on_training_start(self) -> None:
            torch.set_num_threads(1)
            self.start = time.perf_counter()

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next_eval:
                self.record()
                self.next_eval += every
            return True

    return EvalClock()


def _train_sb3(model: Any, steps: int, evaluate: Callable[[Any], float], every: int) -> Curve:
    clock = _eval_callback(evaluate, every)
    model.learn(total_timesteps=steps, callback=clock)
    if not clock.curve or clock.curve[-1][0] != model.num_timesteps:
        clock.record()  # the final evaluation, as rlightning's engine takes one at the end
    return clock.curve


def _evaluate_vec(eval_env: Any, episodes: int) -> Callable[[Any], float]:
    from stable_baselines3.common.evaluation import evaluate_policy

    def evaluate(model: Any) -> float:
        mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=episodes, deterministic=True)
        return float(mean)

    return evaluate


def _atari_envs(task: Task, seed: int, n_envs: int) -> tuple[Any, Any]:
    """SB3's AtariWrapper + 4-frame stack for training (life loss ends an episode, clipped rewards) and one
    eval env without either (the game score)."""
    import ale_py
    import gymnasium
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gymnasium.register_envs(ale_py)
    env = VecFrameStack(make_atari_env(task.env_id, n_envs=n_envs, seed=seed), n_stack=4)
    eval_env = VecFrameStack(make_atari_env(task.env_id, n_envs=1, seed=seed + 10_000, wrapper_kwargs={
        "terminal_on_life_loss": False, "clip_reward": False}), n_stack=4)
    return env, eval_env


def sb3_atari_ppo(task: Task, seed: int, steps: int, every: int, episodes: int, quick: bool) -> Curve:
    """rl-zoo's Atari PPO (8 envs, 128 steps, 4 epochs, minibatch 256, lr 2.5e-4 linear, clip 0.1)."""
    from stable_baselines3 import PPO

    env, eval_env = _atari_envs(task, seed, 8)
    model = PPO("CnnPolicy", env, n_steps=128, n_epochs=4, batch_size=256, learning_rate=lambda r: r * 2.5e-4,
                clip_range=0.1, ent_coef=0.01, vf_coef=0.5, gamma=0.99, gae_lambda=0.95, max_grad_norm=0.5,
                seed=seed, device="cpu", verbose=0)
    try:
        return _train_sb3(model, steps, _evaluate_vec(eval_env, episodes), every)
    finally:
        env.close()
        eval_env.close()


def sb3_atari_dqn(task: Task, seed: int, steps: int, every: int, episodes: int, quick: bool) -> Curve:
    """rl-zoo's Atari DQN (examples/breakout_dqn.yaml): replay 100k, lr 1e-4, batch 32, 100k warm-up steps
    (``--quick``: 1,000 and a 10k replay, as the rlightning side), target refresh every 1,000 env steps (SB3
    counts env steps; 250 updates), one update per 4 transitions (4 envs, one gradient step per vector step),
    epsilon 1 -> 0.01 over 10%."""
    from stable_baselines3 import DQN

    env, eval_env = _atari_envs(task, seed, 4)
    model = DQN("CnnPolicy", env, buffer_size=10_000 if quick else 100_000, learning_rate=1e-4, batch_size=32,
                learning_starts=1_000 if quick else 100_000, target_update_interval=1000, train_freq=1,
                gradient_steps=1, exploration_fraction=0.1, exploration_final_eps=0.01, gamma=0.99,
                optimize_memory_usage=False, seed=seed, device="cpu", verbose=0)
    try:
        return _train_sb3(model, steps, _evaluate_vec(eval_env, episodes), every)
    finally:
        env.close()
        eval_env.close()


def sb3_mujoco_ppo(task: Task, seed: int, steps: int, every: int, episodes: int, quick: bool) -> Curve:
    """CleanRL's ppo_continuous_action settings (those of examples/*_ppo.yaml) in SB3: VecNormalize of
    observations and rewards (clip 10), 64-64 tanh, orthogonal init, Adam eps 1e-5, value clipping 0.2."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(make_vec_env(task.env_id, n_envs=1, seed=seed), gamma=0.99, clip_obs=10.0, clip_reward=10.0)
    eval_env = VecNormalize(make_vec_env(task.env_id, n_envs=1, seed=seed + 10_000), training=False,
                            norm_reward=False, clip_obs=10.0)
    model = PPO("MlpPolicy", env, n_steps=2048, batch_size=64, n_epochs=10, learning_rate=lambda r: r * 3e-4,
                gamma=0.99, gae_lambda=0.95, clip_range=0.2, clip_range_vf=0.2, ent_coef=0.0, vf_coef=0.5,
                max_grad_norm=0.5, seed=seed, device="cpu", verbose=0,
                policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]}, "activation_fn": torch.nn.Tanh,
                               "log_std_init": 0.0, "ortho_init": True, "optimizer_kwargs": {"eps": 1e-5}})
    inner = _evaluate_vec(eval_env, episodes)

    def evaluate(m: Any) -> float:
        eval_env.obs_rms = env.obs_rms  # frozen training statistics, as rlightning's eval uses
        return inner(m)

    try:
        return _train_sb3(model, steps, evaluate, every)
    finally:
        env.close()
        eval_env.close()


def sb3_sac(task: Task, seed: int, steps: int, every: int, episodes: int, quick: bool) -> Curve:
    """rl-zoo's MuJoCo SAC (SB3 defaults: 256-256 ReLU, lr 3e-4, batch 256, tau 0.005, 1 update per step,
    auto entropy) with its 10k warm-up steps (``--quick``: 500, as the rlightning side)."""
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env(task.env_id, n_envs=1, seed=seed)
    eval_env = make_vec_env(task.env_id, n_envs=1, seed=seed + 10_000)
    model = SAC("MlpPolicy", env, learning_starts=500 if quick else 10_000, buffer_size=1_000_000, batch_size=256,
                learning_rate=3e-4, tau=0.005, gamma=0.99, train_freq=1, gradient_steps=1, seed=seed, device="cpu",
                verbose=0)
    try:
        return _train_sb3(model, steps, _evaluate_vec(eval_env, episodes), every)
    finally:
        env.close()
        eval_env.close()


CLEANRL = "CleanRL ppo_continuous_action, v4, 1M steps, 3 seeds, training episodic return"
TASKS: dict[str, Task] = {
    "breakout_ppo": Task("breakout_ppo.yaml", "BreakoutNoFrameskip-v4", "PPO", 1_000_000, 8_192, 2, 2,
                         sb3_atari_ppo, requires=("ale_py",)),
    "breakout_dqn": Task("breakout_dqn.yaml", "BreakoutNoFrameskip-v4", "DQN", 10_000_000, 8_192, 1, 1,
                         sb3_atari_dqn, requires=("ale_py",),
                         quick_overrides=("policy.params.learning_starts=1000", "buffer.params.capacity=10000")),
    "hopper_ppo": Task("hopper_ppo.yaml", "Hopper-v5", "PPO", 1_000_000, 8_192, 3, 1, sb3_mujoco_ppo,
                       published=f"2382.9 ± 271.7 ({CLEANRL})", requires=("mujoco",)),
    "halfcheetah_ppo": Task("halfcheetah_ppo.yaml", "HalfCheetah-v5", "PPO", 1_000_000, 8_192, 3, 1,
                            sb3_mujoco_ppo, published=f"1442.6 ± 46.0 ({CLEANRL})", requires=("mujoco",)),
    "walker2d_ppo": Task("walker2d_ppo.yaml", "Walker2d-v5", "PPO", 1_000_000, 8_192, 3, 1, sb3_mujoco_ppo,
                         published="none in ../shared/REFERENCES.md (its CleanRL table has no Walker2d row)",
                         requires=("mujoco",)),
    "halfcheetah_sac": Task("halfcheetah_sac.yaml", "HalfCheetah-v5", "SAC", 100_000, 2_000, 2, 2, sb3_sac,
                            requires=("mujoco",), quick_overrides=("policy.params.learning_starts=500",)),
    "hopper_sac": Task("hopper_sac.yaml", "Hopper-v5", "SAC", 100_000, 2_000, 2, 2, sb3_sac,
                       requires=("mujoco",), quick_overrides=("policy.params.learning_starts=500",)),
}


# -- rlightning runs ---------------------------------------------------------------------------------------
def _steps_per_iteration(cfg: Any) -> int:
    return sum(e.num_envs * e.num_workers for e in cfg.env) * cfg.engine.params.rollout_steps


def _eval_iterations(cfg: Any, steps: int, points: int) -> int:
    """Iterations between two evaluations: about ``steps / points`` env steps."""
    return max(1, round(steps / points / _steps_per_iteration(cfg)))


def eval_spacing(task: Task, steps: int, points: int) -> int:
    """Env steps between two evaluations: whole iterations of the example, about ``steps / points``."""
    from rlightning_core import load_config

    cfg = load_config(EXAMPLES / task.config)
    return _eval_iterations(cfg, steps, points) * _steps_per_iteration(cfg)


def run_rlightning(task: Task, seed: int, steps: int, points: int, episodes: int, quick: bool,
                   run_dir: Path) -> Curve:
    """Train the example once (the ``rlightning train`` path) into ``run_dir``; the eval curve from its
    ``metrics.jsonl``."""
    from rlightning_core import load_config
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

    base = [f"engine.total_steps={steps}", f"seed={seed}", "checkpoint.every=0", "checkpoint.at_end=false",
            "logging.progress=false", "logging.level=WARNING", "engine.target_eval_return=null",
            f"engine.eval_episodes={episodes}", *(task.quick_overrides if quick else ())]
    every = _eval_iterations(load_config(EXAMPLES / task.config, overrides=base), steps, points)
    cfg = load_config(EXAMPLES / task.config,
                      overrides=[*base, f"engine.eval_every={every}", f"logging.log_every={every}"])
    env_group = build_env_group(cfg.env, seed=cfg.seed)
    policy_group = build_policy_group(cfg.policy.type, cfg.policy, cfg.cluster)
    buffer = build_data_buffer(cfg.buffer.type, cfg.buffer)
    engine = build_engine(cfg, env_group, policy_group, buffer)
    shutil.rmtree(run_dir, ignore_errors=True)  # a run directory of an earlier invocation
    try:
        result = engine.run(str(run_dir))
    finally:
        env_group.close()
    if result.stop_reason == "interrupted":  # a signal stopped it: not a finished run, and nothing to record
        raise SystemExit(f"{task.config} seed {seed} was interrupted ({result.stop_signal}); nothing recorded")
    curve: Curve = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if isinstance(row.get("eval/episode_return_mean"), int | float):
            curve.append((int(row["step"]), float(row["time/train_s"]), float(row["eval/episode_return_mean"])))
    return curve


# -- report ------------------------------------------------------------------------------------------------
def _mean_std(values: list[float]) -> str:
    if not values:
        return "-"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.1f} ± {std:.1f}"


def plot(name: str, task: Task, curves: dict[str, list[Curve]], out: Path) -> list[Path]:
    """Two PNGs: eval return vs env steps and vs training wall time, mean over seeds, each seed faint."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for axis, label in ((0, "env steps"), (1, "training wall time (s)")):
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
        for i, (who, runs) in enumerate(curves.items()):
            color = f"C{i}"
            for run in runs:
                ax.plot([p[axis] for p in run], [p[2] for p in run], color=color, alpha=0.3, linewidth=1)
            n = min((len(r) for r in runs), default=0)
            if n:
                xs = [statistics.mean(r[k][axis] for r in runs) for k in range(n)]
                ys = [statistics.mean(r[k][2] for r in runs) for k in range(n)]
                ax.plot(xs, ys, color=color, linewidth=2, label=f"{who} ({len(runs)} seed{'s' * (len(runs) > 1)})")
        ax.set_xlabel(label)
        ax.set_ylabel("eval return (deterministic, unclipped)")
        ax.set_title(f"{task.algo} {task.env_id}")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best")
        fig.tight_layout()
        path = out / f"{name}_{'steps' if axis == 0 else 'wall'}.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


RECORDS = Path(__file__).resolve().parent / "runs"


def _record_path(records: Path, name: str, who: str, seed: int, steps: int) -> Path:
    return records / name / f"{who}_seed{seed}_{steps}.json"


def _save_record(path: Path, who: str, seed: int, steps: int, curve: Curve, started: float, load_start: float,
                 versions: dict[str, str]) -> None:
    """One finished run: its curve, when it ran, the machine's load at its ends and the library versions."""
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"who": who, "seed": seed, "steps": steps, "curve": curve,
              "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)),
              "minutes": round((time.time() - started) / 60, 1), "load_start": round(load_start, 2),
              "load_end": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(), "versions": versions}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short budgets: check the pipeline in minutes")
    parser.add_argument("--only", nargs="+", choices=sorted(TASKS), help="run only these tasks")
    parser.add_argument("--seeds", type=int, help="rlightning seeds per task (default: the task's; 0: none)")
    parser.add_argument("--ref-seeds", type=int, help="SB3 seeds per task (default: the task's; 0: none)")
    parser.add_argument("--steps", type=int, help="env steps per run (default: the task's budget)")
    parser.add_argument("--points", type=int, default=10, help="evaluations per run (default 10)")
    parser.add_argument("--episodes", type=int, default=10, help="episodes per evaluation (default 10)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "suites",
                        help="where curves and results.json go")
    parser.add_argument("--resume", action="store_true",
                        help="keep the runs already recorded (full budgets: benchmarks/suites/runs/) and run only "
                             "the missing ones; the report covers every recorded run")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    logging.getLogger("rlightning").setLevel(logging.WARNING)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"standard suites{' (--quick)' if args.quick else ''}: load average {load} on {os.cpu_count()} CPUs, "
          f"torch {torch.__version__} (1 thread)")
    try:
        import stable_baselines3
    except ImportError:
        print("  SKIPPED: stable-baselines3 is not installed (pip install 'stable-baselines3>=2.3')")
        return
    print(f"  stable-baselines3 {stable_baselines3.__version__}")
    from rlightning_core import __version__ as rl_version

    versions = {"rlightning": rl_version, "stable-baselines3": stable_baselines3.__version__,
                "torch": torch.__version__, "commit": _commit()}
    args.out.mkdir(parents=True, exist_ok=True)
    # a run of the full budget is recorded where it is kept with the repository, so that the hours of a suite
    # can be spread over several invocations (--resume); a --quick run only checks the pipeline
    records = args.out / "runs" if args.quick else RECORDS
    results: dict[str, Any] = {"quick": args.quick, "load_start": os.getloadavg(), "tasks": {}}
    for name in args.only or list(TASKS):
        task = TASKS[name]
        missing = [m for m in task.requires if not _importable(m)]
        if missing:
            print(f"\n{name}: SKIPPED ({', '.join(missing)} missing: pip install 'rlightning-gymnasium[atari]' "
                  f"'gymnasium[mujoco]')")
            continue
        steps = args.steps or (task.quick_steps if args.quick else task.steps)
        points = 4 if args.quick else args.points
        episodes = 2 if args.quick else args.episodes
        seeds = args.seeds if args.seeds is not None else (1 if args.quick else task.seeds)
        ref_seeds = args.ref_seeds if args.ref_seeds is not None else (1 if args.quick else task.ref_seeds)
        print(f"\n{name}: {task.algo} {task.env_id}, {steps:,} env steps, rlightning {seeds} seed(s), "
              f"SB3 {ref_seeds} seed(s), {points} evaluations of {episodes} episodes", flush=True)
        every = eval_spacing(task, steps, points)  # both sides evaluate on the same env-step schedule
        for seed in range(max(seeds, ref_seeds)):  # alternating, so load from other jobs hits both alike
            for who, wanted in (("rlightning", seeds), ("stable-baselines3", ref_seeds)):
                path = _record_path(records, name, who, seed, steps)
                if seed >= wanted or (args.resume and path.exists()):
                    continue
                started, load_start = time.time(), os.getloadavg()[0]
                if who == "rlightning":
                    curve = run_rlightning(task, seed, steps, points, episodes, args.quick,
                                           args.out / f"{name}_rlightning_seed{seed}")
                else:
                    curve = task.sb3(task, seed, steps, every, episodes, args.quick)
                _save_record(path, who, seed, steps, curve, started, load_start, versions)
                print(f"  {who:<17} seed {seed}: final {curve[-1][2]:.1f} after {curve[-1][0]:,} steps, "
                      f"{curve[-1][1]:.1f} s (load {load_start:.2f} -> {os.getloadavg()[0]:.2f})", flush=True)
        # report: every recorded run of this task and budget, this invocation's and earlier ones
        runs = {who: [json.loads(p.read_text()) for p in sorted((records / name).glob(f"{who}_seed*_{steps}.json"))]
                for who in ("rlightning", "stable-baselines3")}
        for who, recs in runs.items():
            for r in recs:
                print(f"  recorded: {who} seed {r['seed']}, {r['started']}, load {r['load_start']} -> "
                      f"{r['load_end']}: final {r['curve'][-1][2]:.1f}, training {r['curve'][-1][1]:.1f} s")
        curves = {who: [r["curve"] for r in recs] for who, recs in runs.items()}
        finals = {who: [c[-1][2] for c in cs] for who, cs in curves.items()}
        walls = {who: [c[-1][1] for c in cs] for who, cs in curves.items()}
        ratio = (statistics.mean(walls["rlightning"]) / statistics.mean(walls["stable-baselines3"])
                 if walls["rlightning"] and walls["stable-baselines3"] else float("nan"))
        print(f"  final return: rlightning {_mean_std(finals['rlightning'])}, SB3 "
              f"{_mean_std(finals['stable-baselines3'])}; published: {task.published or '-'}")
        if walls["rlightning"] and walls["stable-baselines3"]:
            print(f"  training wall: rlightning {statistics.mean(walls['rlightning']):.1f} s, SB3 "
                  f"{statistics.mean(walls['stable-baselines3']):.1f} s, ratio {ratio:.2f} (compare the loads "
                  f"above: runs recorded in different invocations ran under different load)")
        pairs = _seed_pairs(runs)
        for seed, (rl, sb3) in pairs.items():
            print(f"  training wall, seed {seed} of both sides: {rl['curve'][-1][1]:.1f} s / "
                  f"{sb3['curve'][-1][1]:.1f} s = {rl['curve'][-1][1] / sb3['curve'][-1][1]:.2f} (loads at start "
                  f"{rl['load_start']} and {sb3['load_start']})")
        pngs = plot(name, task, curves, args.out)
        print(f"  curves: {', '.join(str(p) for p in pngs)}")
        results["tasks"][name] = {"env": task.env_id, "algo": task.algo, "steps": steps, "curves": curves,
                                  "final": finals, "train_s": walls, "wall_ratio": ratio,
                                  "wall_ratio_by_seed": {seed: rl["curve"][-1][1] / sb3["curve"][-1][1]
                                                         for seed, (rl, sb3) in pairs.items()},
                                  "published": task.published, "runs": runs}
    results["load_end"] = os.getloadavg()
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"\nwrote {args.out / 'results.json'}")


def _seed_pairs(runs: dict[str, list[dict[str, Any]]]) -> dict[int, tuple[dict[str, Any], dict[str, Any]]]:
    """The recorded runs of each seed both sides ran, ``{seed: (rlightning's, SB3's)}``.

    The two runs of a seed ran back to back (the runner alternates sides), so their wall times saw about the
    same load, which the mean over all seeds does not promise when seeds were recorded in different invocations.
    """
    sb3 = {r["seed"]: r for r in runs["stable-baselines3"]}
    return {r["seed"]: (r, sb3[r["seed"]]) for r in runs["rlightning"] if r["seed"] in sb3}


def _commit() -> str:
    """The repository's commit (``+`` when the tree has changes), or ``unknown`` outside a git checkout."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+" if dirty else "")


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    sys.exit(main())
