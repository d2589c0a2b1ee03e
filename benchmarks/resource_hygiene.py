"""Resource hygiene: a 500k-step CartPole PPO run in one process keeps its memory, file descriptors and threads flat.

The run (examples/cartpole_ppo.yaml, no early stop, a checkpoint every 20 iterations, evaluations every 50) is
sampled after every iteration by an observer plugin: resident set size (``VmRSS``), open file descriptors
(``/proc/self/fd``) and OS threads (``/proc/self/status``). Targets: RSS at the end within 10% of the RSS after the
first 50k steps, and no more fds or threads at the end than after 50k steps.

Run: ``python benchmarks/resource_hygiene.py [--steps 500000] [--every 25000]``. Always exits 0; prints PASS or FAIL.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from rlightning_core.hookspecs import hookimpl

ROOT = Path(__file__).resolve().parents[1]


def sample() -> dict[str, float]:
    """RSS (MiB), open fds and OS threads of this process, from /proc."""
    status = Path("/proc/self/status").read_text().splitlines()
    fields = {line.split(":")[0]: line.split(":")[1].strip() for line in status if ":" in line}
    return {"rss_mib": int(fields["VmRSS"].split()[0]) / 1024, "fds": float(len(os.listdir("/proc/self/fd"))),
            "threads": float(fields["Threads"])}


class Sampler:
    """Observer plugin: records a sample at the first iteration past each multiple of ``every`` env steps."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.samples: list[tuple[int, dict[str, float]]] = []
        self._next = every

    @hookimpl
    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        """Called after every logged iteration."""
        if step >= self._next:
            self.samples.append((step, sample()))
            while self._next <= step:
                self._next += self.every


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500_000, help="env steps to train (default 500000)")
    parser.add_argument("--every", type=int, default=25_000, help="sample every N env steps (default 25000)")
    parser.add_argument("--baseline", type=int, default=50_000, help="the reference point (default 50000)")
    args = parser.parse_args()

    from rlightning_core import load_config
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group
    from rlightning_core.plugins import load_plugins

    sampler = Sampler(args.every)
    config = load_config(ROOT / "examples" / "cartpole_ppo.yaml", [
        f"engine.total_steps={args.steps}", "engine.target_eval_return=null", "engine.eval_every=50",
        "engine.eval_episodes=5", "checkpoint.every=20", "logging.progress=false", "logging.log_every=1"])
    with tempfile.TemporaryDirectory(prefix="rl-hygiene-") as tmp:
        env_group = build_env_group(config.env, seed=config.seed)
        policy_group = build_policy_group(config.policy.type, config.policy, config.cluster)
        engine = build_engine(config, env_group, policy_group, build_data_buffer(config.buffer.type, config.buffer))
        engine.plugins = load_plugins(extra=[("resource-sampler", sampler)])
        start = sample()
        t0 = time.perf_counter()
        result = engine.run(Path(tmp) / "run")
        wall = time.perf_counter() - t0
        env_group.close()
    end = sample()

    print(f"{result.env_steps} env steps in {wall:.0f}s ({result.env_steps / wall:.0f} steps/s), "
          f"{result.iterations} iterations")
    print(f"{'env steps':>10} {'RSS MiB':>9} {'fds':>5} {'threads':>8}")
    print(f"{'start':>10} {start['rss_mib']:9.1f} {start['fds']:5.0f} {start['threads']:8.0f}")
    for step, s in sampler.samples:
        print(f"{step:>10} {s['rss_mib']:9.1f} {s['fds']:5.0f} {s['threads']:8.0f}")
    print(f"{'after run':>10} {end['rss_mib']:9.1f} {end['fds']:5.0f} {end['threads']:8.0f}")
    base = next((s for step, s in sampler.samples if step >= args.baseline), None)
    last = sampler.samples[-1][1] if sampler.samples else None
    if base is None or last is None:
        print("FAIL: the run was too short to sample")
        return
    growth = last["rss_mib"] / base["rss_mib"] - 1
    ok_rss = abs(growth) <= 0.10
    ok_fds = last["fds"] <= base["fds"]
    ok_threads = last["threads"] <= base["threads"]
    print(f"RSS {base['rss_mib']:.1f} MiB at {args.baseline} steps -> {last['rss_mib']:.1f} MiB at the end "
          f"({growth:+.1%}, target within 10%): {'ok' if ok_rss else 'too much'}; fds {base['fds']:.0f} -> "
          f"{last['fds']:.0f}; threads {base['threads']:.0f} -> {last['threads']:.0f}")
    print("PASS" if ok_rss and ok_fds and ok_threads else "FAIL")


if __name__ == "__main__":
    main()
