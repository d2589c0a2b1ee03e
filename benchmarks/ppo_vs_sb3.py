"""rlightning PPO against Stable-Baselines3 PPO on CartPole-v1, measured in the same run.

(a) *Same work*: both train with rl-zoo's tuned CartPole-v1 hyperparameters (8 envs, n_steps 32,
    batch 256, 20 epochs, gamma 0.98, GAE lambda 0.8, ent_coef 0, Adam lr 1e-3 decayed linearly to 0, clip
    0.2; SB3 also decays the clip range linearly, rlightning keeps it at 0.2 — the work per step is the same)
    for a fixed budget of env steps, with no evaluation; env steps per second of training are compared.
    rlightning is timed by its engine (``result.train_s``), SB3 from ``on_training_start`` to the end of
    ``learn()``. Target: SPS(rlightning) >= 1.8 x SPS(SB3).

(b) *Time to solve*: wall time of training until the evaluation mean return reaches 475 — rlightning with
    ``examples/cartpole_ppo.yaml``, SB3 with rl-zoo's tuned hyperparameters — median over seeds. Both evaluate
    on the same schedule, every 2,048 env steps (after each 8th update of 256 steps), 10 episodes with
    deterministic actions on separate envs; evaluation time is excluded from the wall time and reported
    apart. Each run is capped at ``--cap`` env steps (both anneal their learning rate over that budget, as
    tuned: rl-zoo trains 1e5 steps, the example 100,000). Target: median time(rlightning) / median time(SB3)
    <= 0.2.

One torch thread for everything; the compared variants alternate (A, B, A, B ...) and medians are reported.

Run: ``python benchmarks/ppo_vs_sb3.py [--part a|b|all] [--steps 25000] [--repeats 2] [--seeds 5]
[--cap 100000]``. Needs ``stable-baselines3`` (skipped with a message without it). Always exits 0; prints
PASS or FAIL.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import NO_EXTRAS, interleave, med, run_rlightning, setup, verdict

#: rl-zoo's hyperparams/ppo.yml, CartPole-v1 (n_timesteps 1e5, policy MlpPolicy).
ZOO = {"n_steps": 32, "batch_size": 256, "gae_lambda": 0.8, "gamma": 0.98, "n_epochs": 20, "ent_coef": 0.0}
ZOO_N_ENVS = 8
ZOO_LR, ZOO_CLIP = 1e-3, 0.2

#: rlightning overrides matching ZOO on top of examples/cartpole_ppo.yaml (which already holds these values).
SAME_WORK = ("env[0].num_envs=8", "engine.params.rollout_steps=32", "policy.params.minibatch_size=256",
             "policy.params.epochs=20", "policy.params.gamma=0.98", "policy.params.gae_lambda=0.8",
             "policy.params.ent_coef=0.0", "policy.params.lr=0.001", "policy.params.anneal_lr=true",
             "policy.params.clip_ratio=0.2", "policy.params.hidden_sizes=[64,64]")

EVAL_EVERY_STEPS = 2048
EVAL_EPISODES = 10
TARGET_RETURN = 475.0


def _linear(start: float) -> Any:
    """rl-zoo's ``lin_<start>``: the value decays linearly from ``start`` to 0 over training."""
    return lambda progress_remaining: progress_remaining * start


def sb3_ppo(seed: int, total_steps: int, *, solve: bool) -> dict[str, Any]:
    """Train SB3 PPO with rl-zoo's CartPole-v1 settings; time training only (and evaluations apart)."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    class Clock(BaseCallback):
        """Times rollouts and the whole run; with ``solve``, evaluates every 2,048 steps off the clock."""

        def __init__(self, eval_env: Any = None) -> None:
            super().__init__()
            self.eval_env = eval_env
            self.start = self.rollout_start = 0.0
            self.collect_s = self.eval_s = 0.0
            self.solved_at: tuple[float, int] | None = None
            self.last_eval: float | None = None

        def _on_training_start(self) -> None:
            torch.set_num_threads(1)
            self.start = time.perf_counter()

        def _on_rollout_start(self) -> None:
            now = time.perf_counter()
            steps = self.num_timesteps
            if self.eval_env is not None and steps and steps % EVAL_EVERY_STEPS == 0 and self.solved_at is None:
                train_s = now - self.start - self.eval_s  # the clock pauses here ...
                mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=EVAL_EPISODES,
                                          deterministic=True)
                self.eval_s += time.perf_counter() - now  # ... and resumes here
                self.last_eval = float(mean)
                if mean >= TARGET_RETURN:
                    self.solved_at = (train_s, steps)
            self.rollout_start = time.perf_counter()

        def _on_rollout_end(self) -> None:
            self.collect_s += time.perf_counter() - self.rollout_start

        def _on_step(self) -> bool:
            return self.solved_at is None

    torch.set_num_threads(1)
    env = make_vec_env("CartPole-v1", n_envs=ZOO_N_ENVS, seed=seed)
    eval_env = make_vec_env("CartPole-v1", n_envs=EVAL_EPISODES, seed=seed + 10_000) if solve else None
    model = PPO("MlpPolicy", env, learning_rate=_linear(ZOO_LR), clip_range=_linear(ZOO_CLIP), seed=seed,
                device="cpu", verbose=0, **ZOO)
    clock = Clock(eval_env)
    model.learn(total_timesteps=total_steps, callback=clock)
    wall = time.perf_counter() - clock.start
    train_wall = wall - clock.eval_s  # training only: the evaluations on the way are taken out
    if eval_env is not None and clock.solved_at is None:  # a final evaluation at the cap, as rlightning's engine does
        t0 = time.perf_counter()
        mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
        clock.eval_s += time.perf_counter() - t0
        clock.last_eval = float(mean)
        if mean >= TARGET_RETURN:
            clock.solved_at = (train_wall, model.num_timesteps)
    env.close()
    if eval_env is not None:
        eval_env.close()
    if clock.solved_at is not None:
        train_s, steps = clock.solved_at
    else:
        train_s, steps = train_wall, model.num_timesteps
    return {"train_s": train_s, "env_steps": steps, "sps": steps / train_s, "collect_s": clock.collect_s,
            "learn_s": train_wall - clock.collect_s, "eval_s": clock.eval_s,
            "solved": clock.solved_at is not None, "last_eval": clock.last_eval}


def _iterations_per_eval(config: str, overrides: list[str]) -> int:
    """Iterations between rlightning evaluations so that they fall every EVAL_EVERY_STEPS env steps."""
    from rlightning_core import load_config

    cfg = load_config(config, overrides=overrides)
    per_iteration = sum(e.num_envs * e.num_workers for e in cfg.env) * cfg.engine.params.rollout_steps
    every = max(1, round(EVAL_EVERY_STEPS / per_iteration))
    if every * per_iteration != EVAL_EVERY_STEPS:
        print(f"  note: rlightning collects {per_iteration} steps per iteration; it evaluates every {every} "
              f"iterations = {every * per_iteration} env steps (SB3 every {EVAL_EVERY_STEPS})")
    return every


def part_a(args: argparse.Namespace) -> None:
    print(f"\n(a) same work: rl-zoo CartPole-v1 hyperparameters, {args.steps:,} env steps, no evaluation, "
          f"{args.repeats} interleaved runs each")
    from ppo_overhead import HPARAMS, hand_ppo  # the hand-written loop: same network and hyperparameters

    overrides = [*NO_EXTRAS, *SAME_WORK, f"engine.total_steps={args.steps}"]
    variants = {
        "rlightning": lambda i: run_rlightning([*overrides, f"seed={i}"]),
        "stable-baselines3": lambda i: sb3_ppo(i, args.steps, solve=False),
    }
    if args.hand:
        variants["hand-written (ref.)"] = lambda i: hand_ppo(args.steps, i, **HPARAMS)
    # untimed warm-up: imports and first-call costs land here, not in the first measured run
    run_rlightning([*NO_EXTRAS, *SAME_WORK, "engine.total_steps=1024"])
    sb3_ppo(0, 1024, solve=False)
    runs = interleave(variants, args.repeats)
    print(f"\n  {'variant':<20}{'steps/s':>10}{'train s':>9}{'collect s':>11}{'learn s':>9}{'vs SB3':>8}")
    sb3_sps = med(runs["stable-baselines3"], "sps")
    for name, rows in runs.items():
        print(f"  {name:<20}{med(rows, 'sps'):>10,.0f}{med(rows, 'train_s'):>9.2f}{med(rows, 'collect_s'):>11.2f}"
              f"{med(rows, 'learn_s'):>9.2f}{med(rows, 'sps') / sb3_sps:>8.2f}")
    print("  (SB3's collect includes its GAE, rlightning's learn does; the hand-written loop of ppo_overhead.py is"
          " a reference\n  for what the same work costs without a framework on this machine)")
    ratio = med(runs["rlightning"], "sps") / sb3_sps
    print(f"  SPS ratio rlightning / SB3 = {ratio:.2f} (target >= {args.target_sps}): "
          f"{verdict(ratio >= args.target_sps)}")


def part_b(args: argparse.Namespace) -> None:
    seeds = list(range(args.seeds))
    print(f"\n(b) time to solve (eval mean >= {TARGET_RETURN:g} over {EVAL_EPISODES} deterministic episodes, "
          f"evaluated every {EVAL_EVERY_STEPS:,} env steps), seeds {seeds}, cap {args.cap:,} steps; "
          f"rlightning: {Path(args.config).name}{' ' + ' '.join(args.override) if args.override else ''}; "
          f"SB3: rl-zoo")
    eval_every = _iterations_per_eval(args.config, args.override)
    overrides = [*NO_EXTRAS, f"engine.eval_every={eval_every}", f"engine.eval_episodes={EVAL_EPISODES}",
                 f"engine.target_eval_return={TARGET_RETURN}", f"engine.total_steps={args.cap}", *args.override]
    variants = {
        "rlightning": lambda i: run_rlightning([*overrides, f"seed={seeds[i]}"], config=args.config),
        "stable-baselines3": lambda i: sb3_ppo(seeds[i], args.cap, solve=True),
    }
    runs = interleave(variants, len(seeds), verbose=False)
    print(f"\n  {'variant':<20}{'seed':>5}{'solved':>8}{'env steps':>11}{'train s':>9}{'eval s':>8}{'last eval':>11}")
    for name, rows in runs.items():
        for seed, r in zip(seeds, rows, strict=True):
            last = "-" if r["last_eval"] is None else f"{r['last_eval']:.1f}"
            print(f"  {name:<20}{seed:>5}{'yes' if r['solved'] else 'NO':>8}{r['env_steps']:>11,}"
                  f"{r['train_s']:>9.2f}{r['eval_s']:>8.2f}{last:>11}")
    print(f"\n  {'median':<20}{'solved':>13}{'env steps':>11}{'train s':>9}{'eval s':>8}")
    for name, rows in runs.items():
        solved = sum(r["solved"] for r in rows)
        print(f"  {name:<20}{f'{solved}/{len(rows)}':>13}{med(rows, 'env_steps'):>11,.0f}"
              f"{med(rows, 'train_s'):>9.2f}{med(rows, 'eval_s'):>8.2f}")
    ours, sb3 = runs["rlightning"], runs["stable-baselines3"]
    unsolved = [f"{n} seed {s}" for n, rows in runs.items() for s, r in zip(seeds, rows, strict=True)
                if not r["solved"]]
    if unsolved:
        print(f"  unsolved within the cap (their time counts as the capped run's train time): "
              f"{', '.join(unsolved)}")
    ratio = med(ours, "train_s") / med(sb3, "train_s")
    ok = ratio <= args.target_time and not any(not r["solved"] for r in ours)
    print(f"  time-to-solve ratio rlightning / SB3 = {ratio:.3f} (target <= {args.target_time}, all rlightning "
          f"seeds solved): {verdict(ok)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("a", "b", "all"), default="all", help="which comparison (default all)")
    parser.add_argument("--steps", type=int, default=25_000, help="(a) env steps per run (default 25000)")
    parser.add_argument("--repeats", "-n", type=int, default=2, help="(a) runs of each variant (default 2)")
    parser.add_argument("--no-hand", dest="hand", action="store_false",
                        help="(a) skip the hand-written reference loop")
    parser.add_argument("--seeds", type=int, default=5, help="(b) seeds 0..N-1 (default 5)")
    parser.add_argument("--cap", type=int, default=100_000, help="(b) env-step cap and LR budget (default 1e5)")
    parser.add_argument("--config", default=str(Path(__file__).resolve().parent.parent / "examples" /
                                                 "cartpole_ppo.yaml"), help="(b) rlightning config")
    parser.add_argument("--override", "-o", action="append", default=[],
                        help="(b) extra rlightning override key=value (repeatable)")
    parser.add_argument("--target-sps", type=float, default=1.8, help="(a) smallest SPS ratio (default 1.8)")
    parser.add_argument("--target-time", type=float, default=0.2, help="(b) largest time ratio (default 0.2)")
    args = parser.parse_args()
    setup("rlightning PPO vs Stable-Baselines3 PPO, CartPole-v1")
    try:
        import stable_baselines3
    except ImportError:
        print("  SKIPPED: stable-baselines3 is not installed (pip install 'stable-baselines3>=2.3'; "
              "`nox -s bench` installs it)")
        return
    print(f"  stable-baselines3 {stable_baselines3.__version__}")
    if args.part in ("a", "all"):
        part_a(args)
    if args.part in ("b", "all"):
        part_b(args)


if __name__ == "__main__":
    main()
