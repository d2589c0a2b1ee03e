"""rlightning SAC against Stable-Baselines3 SAC on Pendulum-v1, measured in the same run.

Both train with SB3's default SAC hyperparameters for ``--steps`` env steps (default 20,000) on one env: 256-256
ReLU MLPs, Adam 3e-4, replay of 1e6, batch 256, tau 0.005, gamma 0.99, automatic entropy tuning from alpha 1
with target -dim(A), 100 warm-up steps of uniform random actions, then one gradient update per env step
(SB3 ``train_freq=1, gradient_steps=1``; rlightning ``utd_ratio: 1`` and, by default, ``rollout_steps: 1`` so
that updates interleave with env steps exactly as in SB3 — ``--rollout-steps 64`` is the example config's
chunking). rlightning runs ``examples/pendulum_sac.yaml`` with the async engine in one process.

Timed: SB3's ``model.learn()`` and rlightning's training iterations (``result.train_s``; the final evaluation
and the run directory's bookkeeping are outside, and reported apart). Neither evaluates during training. Then
both policies are evaluated the same way: ``--eval-episodes`` episodes (default 20) of Pendulum-v1 with
deterministic actions, the same env seeds for both. One torch thread for everything; variants alternate
(rlightning, SB3, rlightning, SB3 ...) over ``--seeds`` seeds.

Targets: wall-time ratio rlightning / SB3 <= 0.85 (mean train seconds over seeds), and a final return at least
SB3's (mean over every evaluation episode of every seed, printed with its standard error); with
``precision: bf16`` (autocast), ratio <= 0.65 with the same return. bf16 is timed on ``--bf16-steps`` env steps
against the fp32 rlightning run of the same length (then scaled by the fp32 ratio), because on CPUs without
native bf16 (AVX2 only, like this project's machines) autocast is emulated and much slower: a full-length bf16
run would take hours. Pass ``--bf16-steps 0`` to skip it.

Run: ``python benchmarks/sac_vs_sb3.py [--steps 20000] [--seeds 1] [--first-seed 0] [--rollout-steps 1]
[--bf16-steps 1000]``.
Needs ``stable-baselines3`` (skipped with a message without it). Always exits 0; prints PASS or FAIL.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, setup, verdict

CONFIG = ROOT / "examples" / "pendulum_sac.yaml"
#: Pure training: no evaluation on the way, no checkpoint, no progress bar (the engine still evaluates once at
#: the end, outside ``train_s``, with 2 episodes; the comparison evaluation below is the same for both).
NO_EXTRAS = ("engine.eval_every=0", "engine.target_eval_return=null", "engine.eval_episodes=2", "checkpoint.every=0",
             "checkpoint.at_end=false", "logging.progress=false", "logging.level=WARNING", "logging.log_every=1000")
EVAL_SEED = 10_000


def evaluate(act: Any, episodes: int) -> list[float]:
    """Returns of ``episodes`` Pendulum-v1 episodes, env seeds ``EVAL_SEED + k``, ``act(obs) -> action``."""
    import gymnasium as gym

    env = gym.make("Pendulum-v1")
    returns = []
    for k in range(episodes):
        obs, _ = env.reset(seed=EVAL_SEED + k)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(act(obs))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return returns


def run_rlightning(seed: int, steps: int, rollout_steps: int, precision: str | None, episodes: int,
                   config: Path = CONFIG, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """Train ``config`` (default ``examples/pendulum_sac.yaml``, SB3 defaults) in this process; time the iterations.

    ``precision`` overrides ``policy.params.precision`` unless ``None``; ``extra`` are further overrides.
    """
    import shutil
    import tempfile

    import torch

    from rlightning_core import load_config
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

    overrides = [*NO_EXTRAS, f"engine.total_steps={steps}", f"engine.params.rollout_steps={rollout_steps}",
                 f"seed={seed}", *extra] + ([f"policy.params.precision={precision}"] if precision is not None else [])
    cfg = load_config(config, overrides=overrides)
    env_group = build_env_group(cfg.env, seed=cfg.seed)
    policy_group = build_policy_group(cfg.policy.type, cfg.policy, cfg.cluster)
    buffer = build_data_buffer(cfg.buffer.type, cfg.buffer)
    run_dir = tempfile.mkdtemp(prefix="rlightning-bench-")
    try:
        t0 = time.perf_counter()
        engine = build_engine(cfg, env_group, policy_group, buffer)
        result = engine.run(run_dir)
        wall = time.perf_counter() - t0
    finally:
        env_group.close()
        shutil.rmtree(run_dir, ignore_errors=True)
    policy = engine.policy_group.rollout

    def act(obs: np.ndarray) -> np.ndarray:
        return policy.act(obs[None].astype(np.float32), deterministic=True).env_actions[0]

    torch.set_num_threads(1)
    return {"train_s": result.train_s, "wall_s": wall, "env_steps": result.env_steps,
            "updates": engine.updates, "returns": evaluate(act, episodes)}


def run_sb3(seed: int, steps: int, episodes: int) -> dict[str, Any]:
    """Train SB3 SAC with its defaults on Pendulum-v1; time ``learn()``."""
    import gymnasium as gym
    import torch
    from stable_baselines3 import SAC

    torch.set_num_threads(1)
    env = gym.make("Pendulum-v1")
    t0 = time.perf_counter()
    model = SAC("MlpPolicy", env, seed=seed, device="cpu", verbose=0)
    t1 = time.perf_counter()
    model.learn(total_timesteps=steps)
    t2 = time.perf_counter()
    env.close()

    def act(obs: np.ndarray) -> np.ndarray:
        return model.predict(obs, deterministic=True)[0]

    return {"train_s": t2 - t1, "wall_s": t2 - t0, "env_steps": steps, "updates": int(model._n_updates),
            "returns": evaluate(act, episodes)}


def mean(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.fmean(r[key] for r in rows)


def returns_of(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """Mean final return over every evaluation episode of every seed, and its standard error."""
    values = [x for r in rows for x in r["returns"]]
    return statistics.fmean(values), statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else 0.0


def side_by_side(seeds: range, run_ours: Any, run_theirs: Any, target_ratio: float) -> float:
    """Run ``run_ours(seed)`` and ``run_theirs(seed)`` alternately per seed, print both and the verdicts.

    Each returns a row with ``train_s``, ``wall_s``, ``updates`` and ``returns``. Returns the train-time ratio.
    """
    ours: list[dict[str, Any]] = []
    sb3: list[dict[str, Any]] = []
    for seed in seeds:
        for name, rows, fn in (("rlightning", ours, run_ours), ("stable-baselines3", sb3, run_theirs)):
            row = fn(seed)
            rows.append(row)
            print(f"    seed {seed} {name:<18} train {row['train_s']:8.1f} s  (wall {row['wall_s']:7.1f} s, "
                  f"{row['updates']:,} updates)  eval return {np.mean(row['returns']):8.1f}", flush=True)
    ratio = mean(ours, "train_s") / mean(sb3, "train_s")
    (r_ours, se_ours), (r_sb3, se_sb3) = returns_of(ours), returns_of(sb3)
    print(f"\n  {'variant':<20}{'train s':>10}{'wall s':>10}{'updates':>10}{'return':>10}{'+- s.e.':>9}")
    for name, rows in (("rlightning", ours), ("stable-baselines3", sb3)):
        r, se = returns_of(rows)
        print(f"  {name:<20}{mean(rows, 'train_s'):>10.1f}{mean(rows, 'wall_s'):>10.1f}"
              f"{mean(rows, 'updates'):>10,.0f}{r:>10.1f}{se:>9.1f}")
    print(f"  time ratio rlightning / SB3 = {ratio:.3f} (target <= {target_ratio}): {verdict(ratio <= target_ratio)}")
    print(f"  final return {r_ours:.1f} +- {se_ours:.1f} vs SB3 {r_sb3:.1f} +- {se_sb3:.1f} (target: at least SB3's; "
          f"difference {r_ours - r_sb3:+.1f}, {abs(r_ours - r_sb3) / max(np.hypot(se_ours, se_sb3), 1e-9):.1f} "
          f"standard errors): {verdict(r_ours >= r_sb3)}")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="env steps per run (default 20000)")
    parser.add_argument("--seeds", type=int, default=1, help="number of seeds (default 1)")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first..first+N-1 (default 0)")
    parser.add_argument("--rollout-steps", type=int, default=1,
                        help="rlightning env steps between two learn calls (default 1, SB3's train_freq)")
    parser.add_argument("--eval-episodes", type=int, default=20, help="final evaluation episodes (default 20)")
    parser.add_argument("--bf16-steps", type=int, default=1000,
                        help="env steps of the bf16 timing (default 1000; 0 skips it)")
    parser.add_argument("--target-ratio", type=float, default=0.85, help="largest fp32 time ratio (default 0.85)")
    parser.add_argument("--target-bf16", type=float, default=0.65, help="largest bf16 time ratio (default 0.65)")
    args = parser.parse_args()
    setup("rlightning SAC vs Stable-Baselines3 SAC, Pendulum-v1, SB3 default hyperparameters")
    try:
        import stable_baselines3
    except ImportError:
        print("  SKIPPED: stable-baselines3 is not installed (pip install 'stable-baselines3>=2.3')")
        return
    import torch

    print(f"  stable-baselines3 {stable_baselines3.__version__}; torch CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    print(f"\n(a) {args.steps:,} env steps, seeds {seeds[0]}..{seeds[-1]}, rlightning rollout_steps "
          f"{args.rollout_steps}, final eval {args.eval_episodes} deterministic episodes (same env seeds)")
    run_rlightning(0, 300, args.rollout_steps, "fp32", 1)  # untimed warm-up: imports, first calls
    run_sb3(0, 300, 1)
    ratio = side_by_side(seeds, lambda s: run_rlightning(s, args.steps, args.rollout_steps, "fp32", args.eval_episodes),
                         lambda s: run_sb3(s, args.steps, args.eval_episodes), args.target_ratio)

    if args.bf16_steps:
        print(f"\n(b) precision bf16 (autocast): {args.bf16_steps:,} env steps, against fp32 rlightning of the "
              "same length, interleaved")
        fp32 = run_rlightning(0, args.bf16_steps, args.rollout_steps, "fp32", 0)
        bf16 = run_rlightning(0, args.bf16_steps, args.rollout_steps, "bf16", 0)
        rel = bf16["train_s"] / fp32["train_s"]
        print(f"    fp32 {fp32['train_s']:.1f} s, bf16 {bf16['train_s']:.1f} s: bf16 / fp32 = {rel:.2f}")
        est = rel * ratio
        print(f"  estimated time ratio rlightning bf16 / SB3 = {rel:.2f} x {ratio:.3f} = {est:.3f} "
              f"(target <= {args.target_bf16}; return not measured at this length): {verdict(est <= args.target_bf16)}")
        if torch.backends.cpu.get_cpu_capability() in ("DEFAULT", "AVX2"):
            print("  note: this CPU has no native bf16 (no AVX512-BF16 / AMX), so bf16 matrix products are emulated")


if __name__ == "__main__":
    main()
