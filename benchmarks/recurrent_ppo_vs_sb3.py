"""rlightning ``recurrent_ppo`` against sb3-contrib's RecurrentPPO on masked-velocity CartPole, in the same run.

The task is ``CartPoleNoVel-v1`` (``rlightning_core.testing.pomdp_env``: CartPole-v1 observing ``[x, theta]``
only). Both learners use the RL Zoo's RecurrentPPO settings for it (``examples/cartpole_masked_recurrent_ppo.yaml``
lists them: 8 envs, n_steps 32, batch 256, 20 epochs, gamma 0.98, GAE 0.8, lr 1e-3 decayed linearly, clip 0.2 —
decayed linearly in SB3, constant in rlightning — observations normalized, a 64-unit LSTM for the actor and one
for the critic, [64] ReLU heads, no orthogonal init). Both evaluate every 2,048 env steps, 10 episodes with
deterministic actions (carrying the LSTM state), off the training clock, and stop at a mean of 475; each run is
capped at ``--cap`` env steps, over which both decay their learning rate.

Reported per learner: how many seeds solved, the median env steps and training seconds to solve (capped runs
count at the cap), and env steps per second of training. Target: rlightning solves (eval >= 475) within 500k
env steps on every seed. A memoryless MLP PPO with the same settings runs beside them as the floor.

Run: ``python benchmarks/recurrent_ppo_vs_sb3.py [--seeds 3] [--cap 500000]``, or ``--quick`` (1 seed, a 30k
cap: shows learning, not the solve). Needs ``sb3-contrib`` (the dev extras; skipped with a message without it).
Always exits 0; prints PASS or FAIL.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import NO_EXTRAS, ROOT, med, run_rlightning, setup, verdict

EXAMPLE = ROOT / "examples" / "cartpole_masked_recurrent_ppo.yaml"
ENV_ID = "CartPoleNoVel-v1"
EVAL_EVERY_STEPS = 2048  # 8 iterations of 8 envs x 32 steps
EVAL_EPISODES = 10
TARGET_RETURN = 475.0
ZOO = {"n_steps": 32, "batch_size": 256, "gae_lambda": 0.8, "gamma": 0.98, "n_epochs": 20, "ent_coef": 0.0}
ZOO_LR, ZOO_CLIP = 1e-3, 0.2
MLP = ["policy.type=ppo", "policy.params={hidden_sizes: [64, 64], activation: relu, ortho_init: false, lr: 1.0e-3, "
       "anneal_lr: true, gamma: 0.98, gae_lambda: 0.8, epochs: 20, minibatch_size: 256, ent_coef: 0.0}"]


def rlightning(seed: int, cap: int, extra: list[str] | None = None) -> dict[str, Any]:
    """Train the example (or, with ``extra``, a variant of it) until eval >= 475 or ``cap`` env steps."""
    overrides = [*NO_EXTRAS, f"seed={seed}", f"engine.total_steps={cap}", "engine.eval_every=8",
                 f"engine.eval_episodes={EVAL_EPISODES}", f"engine.target_eval_return={TARGET_RETURN}",
                 *(extra or [])]
    return run_rlightning(overrides, config=EXAMPLE)


def sb3_recurrent(seed: int, cap: int) -> dict[str, Any]:
    """sb3-contrib RecurrentPPO with the RL Zoo's CartPoleNoVel-v1 settings; training time only."""
    import torch
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    import rlightning_core.testing.pomdp_env  # noqa: F401  (registers CartPoleNoVel-v1)

    env = VecNormalize(make_vec_env(ENV_ID, n_envs=8, seed=seed), norm_obs=True, norm_reward=False)
    eval_env = VecNormalize(make_vec_env(ENV_ID, n_envs=EVAL_EPISODES, seed=seed + 10_000), training=False,
                            norm_obs=True, norm_reward=False)

    class Clock(BaseCallback):
        """Evaluates every 2,048 env steps with the clock paused; stops once the mean reaches 475."""

        def __init__(self) -> None:
            super().__init__()
            self.start = self.eval_s = 0.0
            self.solved_at: tuple[float, int] | None = None
            self.last_eval: float | None = None

        def _on_training_start(self) -> None:
            torch.set_num_threads(1)
            self.start = time.perf_counter()

        def _on_rollout_start(self) -> None:
            steps = self.num_timesteps
            if steps and steps % EVAL_EVERY_STEPS == 0 and self.solved_at is None:
                now = time.perf_counter()
                train_s = now - self.start - self.eval_s  # the clock pauses here ...
                eval_env.obs_rms = env.obs_rms.copy()
                mean, _ = evaluate_policy(self.model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
                self.eval_s += time.perf_counter() - now  # ... and resumes here
                self.last_eval = float(mean)
                if mean >= TARGET_RETURN:
                    self.solved_at = (train_s, steps)

        def _on_step(self) -> bool:
            return self.solved_at is None

    torch.set_num_threads(1)
    model = RecurrentPPO(
        "MlpLstmPolicy", env, learning_rate=lambda r: r * ZOO_LR, clip_range=lambda r: r * ZOO_CLIP, seed=seed,
        device="cpu", verbose=0,
        policy_kwargs={"ortho_init": False, "activation_fn": torch.nn.ReLU, "lstm_hidden_size": 64,
                       "enable_critic_lstm": True, "net_arch": {"pi": [64], "vf": [64]}}, **ZOO)
    clock = Clock()
    model.learn(total_timesteps=cap, callback=clock)
    train_wall = time.perf_counter() - clock.start - clock.eval_s
    if clock.solved_at is None:  # a final evaluation at the cap, as rlightning's engine does
        eval_env.obs_rms = env.obs_rms.copy()
        mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=EVAL_EPISODES, deterministic=True)
        clock.last_eval = float(mean)
        if mean >= TARGET_RETURN:
            clock.solved_at = (train_wall, model.num_timesteps)
    env.close()
    eval_env.close()
    train_s, steps = clock.solved_at if clock.solved_at is not None else (train_wall, model.num_timesteps)
    return {"train_s": train_s, "env_steps": steps, "sps": model.num_timesteps / train_wall,
            "solved": clock.solved_at is not None, "last_eval": clock.last_eval}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cap", type=int, default=500_000)
    parser.add_argument("--quick", action="store_true", help="1 seed, a 30,000-step cap")
    parser.add_argument("--no-mlp", action="store_true", help="skip the MLP PPO floor")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.cap = 1, 30_000
    setup(f"recurrent_ppo vs sb3-contrib RecurrentPPO on {ENV_ID}: {args.seeds} seed(s), cap {args.cap:,} env "
          f"steps, eval every {EVAL_EVERY_STEPS} steps ({EVAL_EPISODES} deterministic episodes), target "
          f"{TARGET_RETURN:.0f}")
    try:
        import sb3_contrib  # noqa: F401
        have_sb3 = True
    except ImportError:
        print("  sb3-contrib is not installed (pip install -e '.[dev]'): its column is skipped")
        have_sb3 = False
    variants: dict[str, Any] = {"rlightning recurrent_ppo": lambda s: rlightning(s, args.cap)}
    if have_sb3:
        variants["sb3-contrib RecurrentPPO"] = lambda s: sb3_recurrent(s, args.cap)
    if not args.no_mlp:
        variants["rlightning ppo (MLP)"] = lambda s: rlightning(s, args.cap, MLP)
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for seed in range(args.seeds):  # interleaved per seed, so load from other jobs hits every learner alike
        for name, fn in variants.items():
            row = fn(seed)
            rows[name].append(row)
            print(f"    seed {seed} {name:<26} {'solved' if row['solved'] else 'capped'} at {row['env_steps']:>7,} "
                  f"steps, {row['train_s']:7.1f} s training, {row['sps']:6,.0f} steps/s, last eval "
                  f"{row['last_eval'] if row['last_eval'] is not None else float('nan'):6.1f} "
                  f"(load {os.getloadavg()[0]:.2f})", flush=True)
    print("\n  learner                      solved  median steps  median train s  median steps/s")
    for name, rs in rows.items():
        print(f"  {name:<28} {sum(r['solved'] for r in rs)}/{len(rs)}   {med(rs, 'env_steps'):>11,.0f}  "
              f"{med(rs, 'train_s'):>14.1f}  {med(rs, 'sps'):>14,.0f}")
    ours = rows["rlightning recurrent_ppo"]
    ok = all(r["solved"] and r["env_steps"] <= 500_000 for r in ours)
    print(f"\n  target: rlightning recurrent_ppo solves within 500k env steps on every seed: {verdict(ok)}"
          + ("" if args.cap >= 500_000 else f" (cap {args.cap:,} < 500k: a short run, not the target's test)"))


if __name__ == "__main__":
    main()
