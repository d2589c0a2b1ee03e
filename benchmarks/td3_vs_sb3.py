"""rlightning TD3 against Stable-Baselines3 TD3 on Pendulum-v1, measured in the same run.

Both train with rl-baselines3-zoo's TD3 Pendulum-v1 hyperparameters (``examples/pendulum_td3.yaml``) for
``--steps`` env steps (default 20,000) on one env: 400-300 ReLU MLPs, Adam 1e-3, replay of 200k, batch 256,
gamma 0.98, tau 0.005, policy delay 2, target policy noise 0.2 clipped at 0.5, Gaussian exploration noise of std
0.1, 10,000 warm-up steps of uniform random actions, then one gradient update per env step (SB3 ``train_freq=1,
gradient_steps=1``; rlightning ``utd_ratio: 1`` and, by default, ``rollout_steps: 1``). rlightning runs the
async engine in one process.

Timed, evaluated and alternated exactly as ``benchmarks/sac_vs_sb3.py`` (whose helpers this script uses):
training time only, then ``--eval-episodes`` deterministic episodes with the same env seeds for both, one torch
thread, seeds alternating rlightning / SB3.

Targets: wall-time ratio rlightning / SB3 <= 0.85 (mean train seconds over seeds), and a final return at least
SB3's (mean over every evaluation episode of every seed, with its standard error).

Run: ``python benchmarks/td3_vs_sb3.py [--steps 20000] [--seeds 1] [--first-seed 0] [--rollout-steps 1]
[--quick]``; ``--quick`` is 12,000 steps with 2,000 warm-up steps and 5 evaluation episodes (a timing check, not
the reference comparison). Needs ``stable-baselines3`` (skipped with a message without it). Always exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ROOT, setup
from sac_vs_sb3 import evaluate, side_by_side
from sac_vs_sb3 import run_rlightning as _run

CONFIG = ROOT / "examples" / "pendulum_td3.yaml"
#: The example's hyperparameters, which SB3 receives as arguments.
HYPER = {"learning_rate": 1e-3, "buffer_size": 200_000, "batch_size": 256, "tau": 0.005, "gamma": 0.98,
         "policy_delay": 2, "target_policy_noise": 0.2, "target_noise_clip": 0.5, "train_freq": 1,
         "gradient_steps": 1}
NOISE_STD = 0.1


def run_rlightning(seed: int, steps: int, rollout_steps: int, learning_starts: int, episodes: int) -> dict[str, Any]:
    """Train ``examples/pendulum_td3.yaml`` in this process (see ``sac_vs_sb3.run_rlightning``)."""
    return _run(seed, steps, rollout_steps, None, episodes, config=CONFIG,
                extra=(f"policy.params.learning_starts={learning_starts}",))


def run_sb3(seed: int, steps: int, learning_starts: int, episodes: int) -> dict[str, Any]:
    """Train SB3 TD3 with the same hyperparameters on Pendulum-v1; time ``learn()``."""
    import gymnasium as gym
    import torch
    from stable_baselines3 import TD3
    from stable_baselines3.common.noise import NormalActionNoise

    torch.set_num_threads(1)
    env = gym.make("Pendulum-v1")
    n = env.action_space.shape[0]
    t0 = time.perf_counter()
    model = TD3("MlpPolicy", env, seed=seed, device="cpu", verbose=0, learning_starts=learning_starts,
                action_noise=NormalActionNoise(np.zeros(n), NOISE_STD * np.ones(n)),
                policy_kwargs={"net_arch": [400, 300]}, **HYPER)
    t1 = time.perf_counter()
    model.learn(total_timesteps=steps)
    t2 = time.perf_counter()
    env.close()

    def act(obs: np.ndarray) -> np.ndarray:
        return model.predict(obs, deterministic=True)[0]

    return {"train_s": t2 - t1, "wall_s": t2 - t0, "env_steps": steps, "updates": int(model._n_updates),
            "returns": evaluate(act, episodes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="env steps per run (default 20000)")
    parser.add_argument("--learning-starts", type=int, default=10_000, help="warm-up steps (default 10000)")
    parser.add_argument("--seeds", type=int, default=1, help="number of seeds (default 1)")
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first..first+N-1 (default 0)")
    parser.add_argument("--rollout-steps", type=int, default=1,
                        help="rlightning env steps between two learn calls (default 1, SB3's train_freq)")
    parser.add_argument("--eval-episodes", type=int, default=20, help="final evaluation episodes (default 20)")
    parser.add_argument("--target-ratio", type=float, default=0.85, help="largest time ratio (default 0.85)")
    parser.add_argument("--quick", action="store_true", help="12k steps, 2k warm-up, 5 evaluation episodes")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.learning_starts, args.eval_episodes = 12_000, 2_000, 5
    setup("rlightning TD3 vs Stable-Baselines3 TD3, Pendulum-v1, rl-zoo hyperparameters")
    try:
        import stable_baselines3
    except ImportError:
        print("  SKIPPED: stable-baselines3 is not installed (pip install 'stable-baselines3>=2.3')")
        return
    print(f"  stable-baselines3 {stable_baselines3.__version__}")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    print(f"\n  {args.steps:,} env steps ({args.learning_starts:,} warm-up), seeds {seeds[0]}..{seeds[-1]}, rlightning "
          f"rollout_steps {args.rollout_steps}, final eval {args.eval_episodes} deterministic episodes")
    run_rlightning(0, 300, args.rollout_steps, 100, 1)  # untimed warm-up: imports, first calls
    run_sb3(0, 300, 100, 1)
    side_by_side(seeds, lambda s: run_rlightning(s, args.steps, args.rollout_steps, args.learning_starts,
                                                 args.eval_episodes),
                 lambda s: run_sb3(s, args.steps, args.learning_starts, args.eval_episodes), args.target_ratio)


if __name__ == "__main__":
    main()
