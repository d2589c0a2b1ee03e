"""rlightning PPO against Stable-Baselines3 PPO ``CnnPolicy`` on Atari Breakout, same work, in the same run.

Both train ``BreakoutNoFrameskip-v4`` with the standard Atari preprocessing (no-op reset, frame skip 4 with
max-pooling, 84x84 grayscale, episodic life and reward clipping in training, fire on reset, 4 stacked frames;
rlightning: ``preset: atari`` of the gymnasium plugin, SB3: ``make_atari_env`` + ``VecFrameStack``) and
rl-zoo's Atari PPO hyperparameters (8 envs, n_steps 128, 4 epochs, minibatch 256, lr 2.5e-4, clip 0.1,
ent 0.01, vf 0.5, the Nature-DQN CNN shared by actor and critic) for a fixed budget of env steps, no
evaluation, one torch thread. rlightning is ``examples/breakout_ppo.yaml`` timed by its engine
(``result.train_s``), SB3 from ``on_training_start`` to the end of ``learn()``. Target: env steps per second
of rlightning >= 1.5 x SB3's. The variants alternate and medians are reported.

``--device cuda`` puts both learners on the GPU (SB3 also acts there; rlightning's rollout copy stays on the CPU
unless ``policy.rollout_device`` says otherwise, so a third variant acts on the GPU too).

Run: ``python benchmarks/atari_throughput.py [--steps 8192] [--repeats 2] [--target 1.5] [--device cpu]``. Needs
``stable-baselines3`` and ``ale-py`` (skipped with a message without them). Always exits 0.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import NO_EXTRAS, ROOT, interleave, med, run_rlightning, setup, verdict

CONFIG = ROOT / "examples" / "breakout_ppo.yaml"
ENV_ID = "BreakoutNoFrameskip-v4"
#: rl-zoo hyperparams/ppo.yml, ``atari`` (the clip range stays at 0.1 in both; rl-zoo anneals it).
ZOO = {"n_steps": 128, "n_epochs": 4, "batch_size": 256, "ent_coef": 0.01, "vf_coef": 0.5, "clip_range": 0.1,
       "gamma": 0.99, "gae_lambda": 0.95, "max_grad_norm": 0.5}
N_ENVS, LR = 8, 2.5e-4


def sb3_ppo(seed: int, total_steps: int, device: str = "cpu") -> dict[str, Any]:
    """Train SB3 PPO ``CnnPolicy`` on Breakout with rl-zoo's Atari settings; time training only."""
    import ale_py
    import gymnasium
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gymnasium.register_envs(ale_py)

    class Clock(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.start = self.rollout_start = self.collect_s = 0.0

        def _on_training_start(self) -> None:
            torch.set_num_threads(1)
            self.start = time.perf_counter()

        def _on_rollout_start(self) -> None:
            self.rollout_start = time.perf_counter()

        def _on_rollout_end(self) -> None:
            self.collect_s += time.perf_counter() - self.rollout_start

        def _on_step(self) -> bool:
            return True

    torch.set_num_threads(1)
    env = VecFrameStack(make_atari_env(ENV_ID, n_envs=N_ENVS, seed=seed), n_stack=4)
    model = PPO("CnnPolicy", env, learning_rate=lambda remaining: remaining * LR, seed=seed, device=device,
                verbose=0, **ZOO)
    clock = Clock()
    model.learn(total_timesteps=total_steps, callback=clock)
    train_s = time.perf_counter() - clock.start
    env.close()
    steps = model.num_timesteps
    return {"train_s": train_s, "env_steps": steps, "sps": steps / train_s, "collect_s": clock.collect_s,
            "learn_s": train_s - clock.collect_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8192, help="env steps per run (default 8192: 8 updates)")
    parser.add_argument("--repeats", "-n", type=int, default=2, help="runs of each variant (default 2)")
    parser.add_argument("--target", type=float, default=1.5, help="smallest SPS ratio (default 1.5)")
    parser.add_argument("--device", default="cpu", help="the learners' torch device (default cpu)")
    args = parser.parse_args()
    setup("rlightning PPO vs Stable-Baselines3 PPO CnnPolicy, BreakoutNoFrameskip-v4, same work")
    try:
        import ale_py  # noqa: F401
        import stable_baselines3
    except ImportError as exc:
        print(f"  SKIPPED: {exc.name} is not installed (pip install 'stable-baselines3>=2.3' "
              "'rlightning-gymnasium[atari]'; `nox -s bench` installs them)")
        return
    print(f"  stable-baselines3 {stable_baselines3.__version__}; {args.steps:,} env steps per run, "
          f"{args.repeats} interleaved runs each, after an untimed warm-up of each; device {args.device}")
    device = [f"policy.device={args.device}"]
    overrides = [*NO_EXTRAS, *device, f"engine.total_steps={args.steps}"]
    run_rlightning([*NO_EXTRAS, *device, "engine.total_steps=1024"], config=CONFIG)
    sb3_ppo(0, 1024, args.device)
    variants = {
        "rlightning": lambda i: run_rlightning([*overrides, f"seed={i}"], config=CONFIG),
        "stable-baselines3": lambda i: sb3_ppo(i, args.steps, args.device),
    }
    if args.device != "cpu":
        variants["rlightning, acts on GPU"] = lambda i: run_rlightning(
            [*overrides, f"policy.rollout_device={args.device}", f"seed={i}"], config=CONFIG)
    runs = interleave(variants, args.repeats)
    sb3_sps = med(runs["stable-baselines3"], "sps")
    print(f"\n  {'variant':<26}{'steps/s':>10}{'train s':>9}{'collect s':>11}{'learn s':>9}{'vs SB3':>8}")
    for name, rows in runs.items():
        print(f"  {name:<26}{med(rows, 'sps'):>10,.0f}{med(rows, 'train_s'):>9.2f}{med(rows, 'collect_s'):>11.2f}"
              f"{med(rows, 'learn_s'):>9.2f}{med(rows, 'sps') / sb3_sps:>8.2f}")
    print("  (SB3's collect includes its GAE, rlightning's learn does)")
    ratio = med(runs["rlightning"], "sps") / sb3_sps
    print(f"  SPS ratio rlightning / SB3 = {ratio:.2f} (target >= {args.target}): {verdict(ratio >= args.target)}")


if __name__ == "__main__":
    main()
