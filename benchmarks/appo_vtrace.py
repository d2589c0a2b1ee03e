"""APPO on Ray with a deliberately slow learner: V-trace on vs off under policy lag.

CartPole-v1 from ``examples/cartpole_appo_ray.yaml`` with 4 env-runner actors streaming 32-step chunks while the
learner actor sleeps ``--delay`` seconds after every update (the ``appo`` benchmark knob
``policy.params.learner_delay_s``; 0 by default), publishing its weights after each. The runners keep collecting
with the weights they last received, up to ``max_chunks_in_flight`` chunks ahead, and each learn call takes the
oldest ``max_chunks_per_learn`` ready chunks (one rollout), so the others queue and rollouts lag the learner
(``perf/policy_lag_*``: versions behind when a chunk reaches the driver; ``async/policy_lag_*``: when it enters the
learner's buffer).
The same run is made with ``vtrace: false`` (every importance ratio taken as 1: no
correction). Printed side by side: the lag, final / best evaluation return, solved (>= 475) and wall time.

    python benchmarks/appo_vtrace.py                 # 100k env steps per variant, seeds 1 2 3
    python benchmarks/appo_vtrace.py --quick         # 30k steps per variant
    python benchmarks/appo_vtrace.py --per-learn 0   # every ready chunk per learn call (lag ~1)
    python benchmarks/appo_vtrace.py --set policy.params.epochs=1   # more overrides, for both variants
    python benchmarks/appo_vtrace.py --loss impala   # IMPALA's loss: -A log pi, one pass, lr 1e-3, entropy 0.01

The Ray cluster is local (loopback, ``num_cpus`` set, no dashboard) and shut down at the end. Numbers depend on
the machine's load (printed first); see docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, setup

CONFIG = ROOT / "examples" / "cartpole_appo_ray.yaml"
#: The policy loss of both variants: the example's clipped surrogate, or IMPALA's plain policy gradient (one pass
#: per rollout, a smaller step and an entropy bonus, as it has no trust region of its own).
LOSSES: dict[str, tuple[str, ...]] = {
    "clipped": (),
    "impala": ("policy.params.clip=false", "policy.params.epochs=1", "policy.params.ent_coef=0.01",
               "policy.params.lr=1e-3"),
}


def run_variant(vtrace: bool, steps: int, delay: float, seed: int, per_learn: int | None,
                extra: list[str] | None = None) -> dict:
    """Train one variant on the running Ray cluster; lag and eval returns from its metrics.jsonl."""
    from rlightning_core import load_config
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

    overrides = [f"seed={seed}", "env.num_workers=4", f"engine.total_steps={steps}", "engine.eval_every=8",
                 "engine.params.max_chunks_in_flight=4", "engine.params.max_staleness=8",
                 f"engine.params.max_chunks_per_learn={'null' if per_learn is None else per_learn}",
                 f"policy.params.vtrace={str(vtrace).lower()}", f"policy.params.learner_delay_s={delay}",
                 "checkpoint.every=0", "checkpoint.at_end=false", "logging.progress=false",
                 "logging.level=WARNING", "logging.log_every=1", *(extra or [])]
    cfg = load_config(CONFIG, overrides=overrides)
    run_dir = Path(tempfile.mkdtemp(prefix="rlightning-appo-bench-"))
    t0 = time.perf_counter()
    env_group = build_env_group(cfg.env, seed=cfg.seed)
    policy_group = build_policy_group(cfg.policy.type, cfg.policy, cfg.cluster)
    engine = build_engine(cfg, env_group, policy_group, build_data_buffer(cfg.buffer.type, cfg.buffer))
    try:
        result = engine.run(run_dir)
        wall = time.perf_counter() - t0
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    finally:
        env_group.close()
        shutil.rmtree(run_dir, ignore_errors=True)
    lag_mean = [r["perf/policy_lag_mean"] for r in rows if "perf/policy_lag_mean" in r]
    lag_max = [r["perf/policy_lag_max"] for r in rows if "perf/policy_lag_max" in r]
    in_mean = [r["async/policy_lag_mean"] for r in rows if "async/policy_lag_mean" in r]
    in_max = [r["async/policy_lag_max"] for r in rows if "async/policy_lag_max" in r]
    evals = [r["eval/episode_return_mean"] for r in rows if "eval/episode_return_mean" in r]
    clip = [r["stats/rho_clip_fraction"] for r in rows if "stats/rho_clip_fraction" in r]
    return {"vtrace": vtrace, "seed": seed, "lag_mean": sum(lag_mean) / len(lag_mean) if lag_mean else float("nan"),
            "lag_max": max(lag_max) if lag_max else float("nan"),
            "in_mean": sum(in_mean) / len(in_mean) if in_mean else float("nan"),
            "in_max": max(in_max) if in_max else float("nan"),
            "rho_clip": sum(clip) / len(clip) if clip else float("nan"), "final": evals[-1] if evals else float("nan"),
            "best": max(evals) if evals else float("nan"), "solved": result.stop_reason == "target_eval_return",
            "env_steps": result.env_steps, "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="30k env steps per variant instead of 100k")
    ap.add_argument("--delay", type=float, default=0.5, help="learner sleep per update, seconds")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--per-learn", type=int, default=4,
                    help="engine.params.max_chunks_per_learn (0: every ready chunk); 4 is one rollout")
    ap.add_argument("--loss", choices=sorted(LOSSES), default="clipped",
                    help="clipped: the example's PPO surrogate; impala: IMPALA's -A log pi (overrides in LOSSES)")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="more config overrides for both variants, e.g. policy.params.epochs=1")
    args = ap.parse_args()
    args.set = [*LOSSES[args.loss], *args.set]
    steps = 30_000 if args.quick else 100_000
    per_learn = args.per_learn or None
    setup(f"APPO on Ray, CartPole-v1, 4 env runners, learner sleeping {args.delay} s per update, "
          f"max_chunks_per_learn={per_learn}, {steps:,} steps, seeds {args.seeds}, overrides {args.set}")
    import ray

    ray.init(num_cpus=6, include_dashboard=False, _node_ip_address="127.0.0.1", logging_level="ERROR",
             log_to_driver=False)
    try:
        rows = []
        for seed in args.seeds:
            for vtrace in (True, False):
                row = run_variant(vtrace, steps, args.delay, seed, per_learn, args.set)
                rows.append(row)
                print(f"    seed {seed} vtrace={str(vtrace).lower():<5} done in {row['wall_s']:.0f} s "
                      f"(load {os.getloadavg()[0]:.2f})", flush=True)
    finally:
        ray.shutdown()
    cols = (("seed", "seed", "{}"), ("vtrace", "vtrace", "{}"), ("perf lag", "lag_mean", "{:.2f}"),
            ("async lag", "in_mean", "{:.2f}"), ("async max", "in_max", "{:.0f}"),
            ("rho clip", "rho_clip", "{:.2f}"), ("final", "final", "{:.1f}"),
            ("best", "best", "{:.1f}"), ("solved", "solved", "{}"), ("env steps", "env_steps", "{:,}"),
            ("wall s", "wall_s", "{:.0f}"))
    print("".join(f"{label:>11}" for label, _, _ in cols))
    for r in rows:
        print("".join(f"{fmt.format(r[key]):>11}" for _, key, fmt in cols))
    for vtrace in (True, False):
        mine = [r for r in rows if r["vtrace"] is vtrace]
        solved = [r for r in mine if r["solved"]]
        mean_final = sum(r["final"] for r in mine) / len(mine)
        mean_lag = sum(r["in_mean"] for r in mine) / len(mine)
        steps_to = (f"{sum(r['env_steps'] for r in solved) / len(solved):,.0f}" if solved else "-")
        print(f"  vtrace={str(vtrace).lower():<5}: solved {len(solved)}/{len(mine)}, mean final eval "
              f"{mean_final:.1f}, mean async lag {mean_lag:.2f}, mean env steps to solve {steps_to}")
    print(f"  load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
