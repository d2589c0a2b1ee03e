"""Framework overhead: rlightning PPO against a hand-written single-file PPO loop doing the same work.

Both train PPO on CartPole-v1 with 8 envs in a Gymnasium ``SyncVectorEnv`` (``SAME_STEP`` autoreset), the
hyperparameters of ``examples/cartpole_ppo.yaml`` (rollout 32 steps x 8 envs, minibatch 256, 20 epochs, Adam
lr 1e-3 annealed linearly, gamma 0.98, GAE lambda 0.8, clip 0.2, max grad norm 0.5), the same network (64-64
tanh actor and critic, orthogonal init) and the same fixed budget of env steps, with no evaluation and no
checkpoints on the way.

- rlightning: the library API, the path ``rlightning train`` takes; timed by the engine itself
  (``result.train_s``: the iterations only, not setup, logging, evaluation or checkpoints).
- hand-written: one function below, written to be as fast as we can make it — numpy buffers, one
  ``inference_mode`` block per rollout, multinomial sampling on ``log_softmax``, GAE in numpy, Adam with
  ``fused=True`` (the fastest CPU Adam in torch 2.x), no entropy term when ``ent_coef`` is 0, no shuffling
  when one minibatch holds the whole rollout, truncated episodes bootstrapped from the final observation (as
  rlightning does). Timed the same way: from the first rollout to the last update.

The variants alternate (A, B, A, B ...) and medians are reported, with the split into *collect* (env
stepping, inference, buffer writes) and *learn* (GAE + epochs + weight sync) so a shortfall can be located.
Target: SPS(rlightning) / SPS(hand-written) >= 0.9.

Run: ``python benchmarks/ppo_overhead.py [--steps 50000] [--repeats 3] [--target 0.9]``. Always exits 0;
prints PASS or FAIL.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import NO_EXTRAS, interleave, med, run_rlightning, setup, verdict

HPARAMS = {"num_envs": 8, "rollout_steps": 32, "minibatch_size": 256, "epochs": 20, "lr": 1e-3,
           "gamma": 0.98, "gae_lambda": 0.8, "clip": 0.2, "vf_coef": 0.5, "ent_coef": 0.0, "max_grad_norm": 0.5}


def hand_ppo(total_steps: int, seed: int, *, num_envs: int, rollout_steps: int, minibatch_size: int,
             epochs: int, lr: float, gamma: float, gae_lambda: float, clip: float, vf_coef: float,
             ent_coef: float, max_grad_norm: float) -> dict[str, Any]:
    """PPO on CartPole-v1 in one function; returns steps, train/collect/learn seconds (no setup)."""
    import gymnasium as gym
    import numpy as np
    import torch
    from gymnasium.vector import AutoresetMode, SyncVectorEnv
    from torch import nn

    def layer(i: int, o: int, gain: float) -> nn.Linear:
        lin = nn.Linear(i, o)
        nn.init.orthogonal_(lin.weight, gain)
        nn.init.zeros_(lin.bias)
        return lin

    def mlp(i: int, o: int, gain: float) -> nn.Sequential:
        return nn.Sequential(layer(i, 64, math.sqrt(2)), nn.Tanh(), layer(64, 64, math.sqrt(2)), nn.Tanh(),
                             layer(64, o, gain))

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    envs = SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(num_envs)], copy=False,
                         autoreset_mode=AutoresetMode.SAME_STEP)
    obs_dim, n_act = envs.single_observation_space.shape[0], int(envs.single_action_space.n)
    actor, critic = mlp(obs_dim, n_act, 0.01), mlp(obs_dim, 1, 1.0)
    params = [*actor.parameters(), *critic.parameters()]
    opt = torch.optim.Adam(params, lr=lr, eps=1e-5, fused=True)
    T, N = rollout_steps, num_envs
    B = T * N
    obs_b = np.zeros((T, N, obs_dim), np.float32)
    act_b = np.zeros((T, N), np.int64)
    logp_b, val_b, rew_b, boot_b = (np.zeros((T, N), np.float32) for _ in range(4))
    term_b, trunc_b = np.zeros((T, N), bool), np.zeros((T, N), bool)
    obs, _ = envs.reset(seed=seed)
    steps = 0
    collect_s = learn_s = env_s = 0.0
    clock = time.perf_counter
    while steps < total_steps:
        # collect
        t0 = clock()
        boot_b[:] = 0.0
        with torch.inference_mode():
            for t in range(T):
                x = torch.from_numpy(obs)
                logp_all = torch.log_softmax(actor(x), -1)
                value = critic(x)
                action = torch.multinomial(logp_all.exp(), 1, generator=gen)
                logp_b[t] = logp_all.gather(-1, action).squeeze(-1).numpy()
                val_b[t] = value.squeeze(-1).numpy()
                act = action.squeeze(-1).numpy()
                act_b[t] = act
                obs_b[t] = obs
                e0 = clock()
                obs, reward, term, trunc, info = envs.step(act)
                env_s += clock() - e0
                rew_b[t], term_b[t], trunc_b[t] = reward, term, trunc
                if trunc.any():  # bootstrap truncated episodes from their real last observation
                    idx = np.flatnonzero(trunc)
                    final = np.stack([info["final_obs"][i] for i in idx]).astype(np.float32)
                    boot_b[t, idx] = critic(torch.from_numpy(final)).squeeze(-1).numpy()
            last_v = critic(torch.from_numpy(obs)).squeeze(-1).numpy()
        steps += B
        t1 = clock()
        # advantages (GAE-lambda; truncation bootstrapped, recursion cut at every episode end)
        for group in opt.param_groups:
            group["lr"] = lr * max(0.0, 1.0 - steps / total_steps)
        next_v = np.empty_like(val_b)
        next_v[:-1], next_v[-1] = val_b[1:], last_v
        next_v = np.where(term_b, np.float32(0.0), np.where(trunc_b, boot_b, next_v))
        delta = rew_b + np.float32(gamma) * next_v - val_b
        carry = (np.float32(gamma * gae_lambda) * ~(term_b | trunc_b)).astype(np.float32)
        adv = np.empty_like(val_b)
        run = np.zeros(N, np.float32)
        for t in range(T - 1, -1, -1):
            run = delta[t] + carry[t] * run
            adv[t] = run
        ret = adv + val_b
        b_obs, b_act = torch.from_numpy(obs_b.reshape(B, obs_dim)), torch.from_numpy(act_b.reshape(B))
        b_logp, b_adv, b_ret = (torch.from_numpy(a.reshape(B)) for a in (logp_b, adv, ret))
        # update
        for _ in range(epochs):
            if minibatch_size >= B:
                batches: list[Any] = [None]
            else:
                perm = torch.randperm(B, generator=gen)
                batches = [perm[s:s + minibatch_size] for s in range(0, B, minibatch_size)]
            for idx in batches:
                if idx is None:
                    o, a, lp0, ad, rt = b_obs, b_act, b_logp, b_adv, b_ret
                else:
                    o, a, lp0, ad, rt = b_obs[idx], b_act[idx], b_logp[idx], b_adv[idx], b_ret[idx]
                logp_all = torch.log_softmax(actor(o), -1)
                logp = logp_all.gather(-1, a.unsqueeze(-1)).squeeze(-1)
                v = critic(o).squeeze(-1)
                ratio = (logp - lp0).exp()
                ad = (ad - ad.mean()) / (ad.std() + 1e-8)
                pg_loss = torch.max(-ad * ratio, -ad * ratio.clamp(1 - clip, 1 + clip)).mean()
                loss = pg_loss + vf_coef * 0.5 * ((v - rt) ** 2).mean()
                if ent_coef:
                    loss = loss - ent_coef * -(logp_all.exp() * logp_all).sum(-1).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(params, max_grad_norm)
                opt.step()
        t2 = clock()
        collect_s += t1 - t0
        learn_s += t2 - t1
    envs.close()
    train_s = collect_s + learn_s
    return {"train_s": train_s, "env_steps": steps, "sps": steps / train_s, "collect_s": collect_s,
            "env_s": env_s, "inference_s": collect_s - env_s, "learn_s": learn_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50_000, help="env steps per run (default 50000)")
    parser.add_argument("--repeats", "-n", type=int, default=3, help="runs of each variant (default 3)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the first repeat (then +1 each)")
    parser.add_argument("--target", type=float, default=0.9, help="smallest acceptable SPS ratio (default 0.9)")
    args = parser.parse_args()
    setup(f"PPO overhead: rlightning vs a hand-written loop, CartPole-v1, 8 envs, {args.steps:,} env steps, "
          f"{args.repeats} interleaved runs each")
    h = HPARAMS
    overrides = [*NO_EXTRAS, f"engine.total_steps={args.steps}", f"env[0].num_envs={h['num_envs']}",
                 f"engine.params.rollout_steps={h['rollout_steps']}",
                 # the same work as the hand-written loop, whatever examples/cartpole_ppo.yaml says today
                 f"policy.params.minibatch_size={h['minibatch_size']}", f"policy.params.epochs={h['epochs']}",
                 f"policy.params.lr={h['lr']}", f"policy.params.gamma={h['gamma']}",
                 f"policy.params.gae_lambda={h['gae_lambda']}", f"policy.params.clip_ratio={h['clip']}",
                 f"policy.params.vf_coef={h['vf_coef']}", f"policy.params.ent_coef={h['ent_coef']}",
                 f"policy.params.max_grad_norm={h['max_grad_norm']}", "policy.params.anneal_lr=true"]
    variants = {
        "rlightning": lambda i: run_rlightning([*overrides, f"seed={args.seed + i}"]),
        "hand-written": lambda i: hand_ppo(args.steps, args.seed + i, **HPARAMS),
    }
    # untimed warm-up: imports and first-call costs land here, not in the first measured run
    run_rlightning([*overrides, "engine.total_steps=1024"])
    hand_ppo(1024, 0, **HPARAMS)
    runs = interleave(variants, args.repeats)

    print(f"\n  medians over {args.repeats} runs (seconds are totals per run)")
    print(f"  {'variant':<14}{'steps/s':>10}{'train s':>9}{'collect s':>11}{'(env':>8}{'policy+rest)':>14}"
          f"{'learn s':>9}{'collect SPS':>13}{'learn us/step':>15}")
    for name, rows in runs.items():
        steps = med(rows, "env_steps")
        collect, env = med(rows, "collect_s"), med(rows, "env_s")
        print(f"  {name:<14}{med(rows, 'sps'):>10,.0f}{med(rows, 'train_s'):>9.2f}{collect:>11.2f}{env:>8.2f}"
              f"{collect - env:>14.2f}{med(rows, 'learn_s'):>9.2f}{steps / collect:>13,.0f}"
              f"{1e6 * med(rows, 'learn_s') / steps:>15.1f}")
    ours, hand = runs["rlightning"], runs["hand-written"]
    ratio = med(ours, "sps") / med(hand, "sps")
    pairs = sorted(o["sps"] / r["sps"] for o, r in zip(ours, hand, strict=True))
    print(f"\n  collect time ratio rlightning / hand = {med(ours, 'collect_s') / med(hand, 'collect_s'):.2f}; "
          f"learn time ratio = {med(ours, 'learn_s') / med(hand, 'learn_s'):.2f}")
    print(f"  per-pair SPS ratios: {', '.join(f'{p:.2f}' for p in pairs)}")
    print(f"  SPS ratio rlightning / hand-written = {ratio:.2f} (target >= {args.target}): "
          f"{verdict(ratio >= args.target)}")


if __name__ == "__main__":
    main()
