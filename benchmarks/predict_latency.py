"""Predict latency: ``load_policy(run).predict`` on a batch against one call per observation, and beside SB3.

A CartPole-v1 PPO run (the ``examples/cartpole_ppo.yaml`` network: 64-64 tanh actor and critic, observation
normalization on) is trained for a small budget into a temporary directory and loaded back with
:func:`rlightning_core.load_policy`, the public API. On the same observations (visited by a random policy):

- batch vs singles: one ``predict`` on a batch of ``--batch`` observations (the mean of 20 in a row) against
  ``--batch`` calls with one observation each, through the same API; target: the batch is >= ``--target``
  times faster.
- single-observation latency (median and p90 over ``--calls`` calls) of rlightning and of SB3's
  ``PPO.predict`` (a ``PPO("MlpPolicy", "CartPole-v1")``, whose default network is the same 64-64 tanh pair;
  untrained: weights do not change the cost), measured alternately in the same run. Without
  stable-baselines3 installed the SB3 column is skipped with a message.

Deterministic actions, one torch thread. Run: ``python benchmarks/predict_latency.py [--batch 256]
[--calls 2000] [--repeats 5] [--target 5]`` (or ``nox -s bench-predict -- FLAGS``, which
installs SB3). Always exits 0; prints PASS or FAIL.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import CARTPOLE_CONFIG, setup, verdict

#: Batch calls timed together per repeat (one call of ~0.3 ms is too short to time alone on a loaded machine).
BATCH_CALLS = 20


def train_run(run_dir: Path, steps: int) -> None:
    """A short PPO run on CartPole with a final checkpoint, through ``rlightning_core.train``."""
    from rlightning_core import train

    train(CARTPOLE_CONFIG, run_dir, overrides=[
        f"engine.total_steps={steps}", "engine.eval_every=0", "engine.target_eval_return=null",
        "checkpoint.every=0", "checkpoint.at_end=true", "logging.progress=false", "logging.level=WARNING",
        "preprocessors=[{type: normalize_obs}]"])


def observations(n: int, seed: int = 0) -> Any:
    """``n`` CartPole observations along random-action episodes (float32, ``[n, 4]``)."""
    from rlightning_core.testing.observations import rollout_observations

    return rollout_observations("CartPole-v1", n, seed)


def single_latencies(predict: Callable[[Any], Any], obs: Any, calls: int) -> list[float]:
    """Seconds of each of ``calls`` single-observation calls, cycling through ``obs``."""
    clock = time.perf_counter
    out = []
    for i in range(calls):
        o = obs[i % len(obs)]
        t0 = clock()
        predict(o)
        out.append(clock() - t0)
    return out


def p90(values: list[float]) -> float:
    """The 90th percentile."""
    return statistics.quantiles(values, n=10)[-1]


def make_sb3() -> Callable[[Any], Any] | None:
    """SB3's ``PPO.predict`` (deterministic) on an untrained CartPole PPO, or ``None`` without SB3."""
    try:
        from stable_baselines3 import PPO
    except ImportError:
        return None
    model = PPO("MlpPolicy", "CartPole-v1", device="cpu", seed=0)
    return lambda o: model.predict(o, deterministic=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--calls", type=int, default=2000, help="single-observation calls per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=4096, help="PPO training budget of the measured run")
    parser.add_argument("--target", type=float, default=5.0, help="batch speed-up over singles to pass")
    args = parser.parse_args()
    setup("predict latency: load_policy(run).predict on CartPole-v1 PPO")

    from rlightning_core import load_policy

    run_dir = Path(tempfile.mkdtemp(prefix="rlightning-bench-predict-"))
    try:
        train_run(run_dir / "run", args.steps)
        policy = load_policy(run_dir / "run")
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    obs = observations(args.batch)
    sb3 = make_sb3()
    if sb3 is None:
        print("  stable-baselines3 is not installed: the SB3 column is skipped (pip install stable-baselines3)")
    ours = lambda o: policy.predict(o)  # noqa: E731
    for fn in (ours, sb3):  # untimed warm-up: first-call costs land here
        if fn is not None:
            single_latencies(fn, obs, 200)
    policy.predict(obs)

    clock = time.perf_counter
    batch_s, singles_s, lat_ours, lat_sb3 = [], [], [], []
    for r in range(args.repeats):  # alternate the measurements so load from other jobs hits all alike
        t0 = clock()
        for _ in range(BATCH_CALLS):
            policy.predict(obs)
        batch_s.append((clock() - t0) / BATCH_CALLS)
        t0 = clock()
        for o in obs:
            policy.predict(o)
        singles_s.append(clock() - t0)
        lat_ours += single_latencies(ours, obs, args.calls)
        if sb3 is not None:
            lat_sb3 += single_latencies(sb3, obs, args.calls)
        print(f"    [{r + 1}/{args.repeats}] batch {batch_s[-1] * 1e3:.3f} ms, {args.batch} singles "
              f"{singles_s[-1] * 1e3:.2f} ms", flush=True)

    batch, singles = statistics.median(batch_s), statistics.median(singles_s)
    ratio = singles / batch
    print(f"\n  batch of {args.batch}: {batch * 1e3:.3f} ms ({batch / args.batch * 1e6:.2f} us/obs); "
          f"{args.batch} single calls: {singles * 1e3:.2f} ms (medians of {args.repeats})")
    print(f"\n  {'single-obs predict':<22}{'median us':>11}{'p90 us':>9}")
    print(f"  {'rlightning':<22}{statistics.median(lat_ours) * 1e6:>11.1f}{p90(lat_ours) * 1e6:>9.1f}")
    if lat_sb3:
        print(f"  {'stable-baselines3':<22}{statistics.median(lat_sb3) * 1e6:>11.1f}{p90(lat_sb3) * 1e6:>9.1f}")
        print(f"  median latency rlightning / SB3 = {statistics.median(lat_ours) / statistics.median(lat_sb3):.2f}")
    print(f"\n  batch speed-up over single calls = {ratio:.1f}x (target >= {args.target:g}): "
          f"{verdict(ratio >= args.target)}")


if __name__ == "__main__":
    main()
