"""Ray mode: scaling with env workers on a slow env, overhead against local mode, startup time.

1. Scaling: a CartPole that sleeps 5 ms per step; collection SPS (env steps per second of the collect phase)
   with K = 1, 2, 4, 8 env-runner actors of 1 env each. Target: >= 0.95 * K of the 1-worker SPS at K = 8.
2. Overhead: CartPole PPO SPS (whole training loop) in ray mode with 2 env-runner actors of 4 envs vs local
   mode with the same 8 envs. Target: >= 0.8. Beside it (report only): the inference-server topology, the
   same 2 env actors asking 1 batching rollout actor every step.
3. Startup: wall time from building the run to the first collected chunk in ray mode, against `ray.init`
   alone, each in a fresh interpreter (alternating, medians). Target: <= ray.init + 2 s.
4. Memory: PSS of the driver and every Ray process of a ray-mode CartPole run with 2 env workers, at the first
   chunk and after two training iterations.
   Target: <= 1.0 GiB in all.

    python benchmarks/ray_scaling.py [--workers 1 2 4 8] [--steps 2048] [--parts scaling overhead startup]
                                     [--startup-repeats 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import ray

ROOT = Path(__file__).resolve().parents[1]
BENCH = str(Path(__file__).resolve().parent)
sys.path.insert(0, BENCH)


def build(config):
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

    env_group = build_env_group(config.env, seed=config.seed, cluster=config.cluster)
    policy_group = build_policy_group(config.policy.type, config.policy, config.cluster)
    return build_engine(config, env_group, policy_group, build_data_buffer(config.buffer.type, config.buffer))


def cartpole(*overrides):
    from rlightning_core import load_config

    return load_config(ROOT / "examples" / "cartpole_ppo.yaml",
                       ["logging.progress=false", "engine.eval_every=0", "engine.eval_episodes=1",
                        "checkpoint.every=0", "checkpoint.at_end=false", *overrides])


def collect_sps(run_dir: Path) -> float:
    import json

    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    values = [r["perf/collect_sps"] for r in rows if "perf/collect_sps" in r][1:]  # first iteration warms up
    return sorted(values)[len(values) // 2]


def scaling(workers: list[int], steps_per_worker: int, tmp: Path) -> None:
    print("\n1. scaling: SleepyCartPole (5 ms/step), 1 env per worker, collection SPS")
    base = None
    for k in workers:
        cfg = cartpole("cluster.mode=ray", "env.params.id=_sleepy_env:SleepyCartPole-v0", f"env.num_workers={k}",
                       "env.num_envs=1", "engine.params.rollout_steps=64", "policy.params.epochs=1",
                       "policy.params.minibatch_size=64", f"engine.total_steps={steps_per_worker * k}",
                       "env.num_cpus=0.5")
        engine = build(cfg)
        engine.run(tmp / f"scale-{k}")
        engine.env_group.close()
        sps = collect_sps(tmp / f"scale-{k}")
        base = base or sps
        print(f"  K={k}: {sps:8.0f} steps/s   x{sps / base:4.2f} of K=1 (ideal x{k})")
    if base and workers[-1] > 1:
        ratio = sps / base / workers[-1]
        print(f"  target at K={workers[-1]}: >= 0.95*K -> {ratio:.2f}*K {'PASS' if ratio >= 0.95 else 'FAIL'}")


def overhead(tmp: Path, total: int, repeats: int = 1) -> None:
    print(f"\n2. overhead: CartPole PPO, whole loop SPS, ray (2 env-runner actors x 4 envs) vs local (8 envs); "
          f"{repeats} alternating round(s), medians")
    modes = {"local": (), "ray, learner actor": ("cluster.mode=ray", "env.num_workers=2", "env.num_envs=4"),
             "ray, learner in the driver (cluster.num_learners=0)": (
                 "cluster.mode=ray", "env.num_workers=2", "env.num_envs=4", "cluster.num_learners=0")}
    sps: dict[str, list[float]] = {m: [] for m in modes}
    steady: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(repeats):
        for k, (m, overrides) in enumerate(modes.items()):
            engine = build(cartpole(*overrides, f"engine.total_steps={total}"))
            result = engine.run(tmp / f"overhead-{r}-{k}")
            engine.env_group.close()
            sps[m].append(result.env_steps / result.train_s)
            steady[m].append(steady_sps(tmp / f"overhead-{r}-{k}"))
        print(f"  round {r + 1} (whole run / after the first iteration): "
              + "   ".join(f"{m} {v[-1]:6.0f} / {steady[m][-1]:6.0f}" for m, v in sps.items()))
    for what, table in (("whole run", sps), ("after the first iteration", steady)):
        med = {m: sorted(v)[len(v) // 2] for m, v in table.items()}
        ls = med["local"]
        for m in list(modes)[1:]:
            ratios = [a / b for a, b in zip(table[m], table["local"], strict=True)]
            print(f"  {what}: {m}: {med[m]:6.0f} sps vs local {ls:6.0f}: ratio of medians {med[m] / ls:.2f}, "
                  f"per round {', '.join(f'{x:.2f}' for x in ratios)} "
                  f"(target >= 0.8: {'PASS' if med[m] / ls >= 0.8 else 'FAIL'})")
    ls = sorted(sps["local"])[len(sps["local"]) // 2]
    engine = build(cartpole("cluster.mode=ray", "env.num_workers=2", "env.num_envs=4", f"engine.total_steps={total}",
                            "cluster.topology=inference_server", "cluster.num_inference_servers=1"))
    served = engine.run(tmp / "ray-server")
    engine.env_group.close()
    ss = served.env_steps / served.train_s
    print(f"  inference_server (2 env actors -> 1 rollout actor, one round trip per step) {ss:8.0f} sps   "
          f"ratio to local {ss / ls:.2f} (report only)")


def steady_sps(run_dir: Path) -> float:
    """Env steps per second of training after the first iteration (whose one-time costs belong to start-up),
    from the run's metrics.jsonl."""
    import json

    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "time/train_s" in r and "step" in r]
    first, last = rows[0], rows[-1]
    return (last["step"] - first["step"]) / (last["time/train_s"] - first["time/train_s"])


def startup(tmp: Path, repeats: int = 1, num_learners: int = 1) -> None:
    """Parts 3 and 4, each measurement in a fresh interpreter (as ``rlightning train`` starts): a driver that
    imported torch or started Ray before would make the next start-up look faster than it is."""
    import json
    import subprocess

    parts = ["init", "first"]
    print(f"\n3. startup: ray.init alone vs build + first chunk in ray mode, cluster.num_learners={num_learners} "
          f"(alternating {', '.join(parts)}, {repeats}x, fresh processes, medians)")
    ray.shutdown()
    byte_compile_sources()
    inits, firsts, afters = [], [], []
    child: dict = {}
    for i in range(repeats):
        runs = {}
        for part in parts:
            out = subprocess.run([sys.executable, __file__, "--child", part, "--num-learners", str(num_learners),
                                  "--memory", str(int(i == repeats - 1 and part == "first"))], capture_output=True,
                                 text=True, timeout=900, cwd=ROOT)
            if out.returncode:
                raise RuntimeError(f"startup child {part} failed:\n{out.stderr[-3000:]}")
            runs[part] = json.loads(out.stdout.strip().splitlines()[-1])
        child = runs["first"]
        inits.append(runs["init"]["init_s"])
        firsts.append(child["first_s"])
        afters.append(child["first_s"] - child["own_init_s"])
        print(f"  run {i + 1}: ray.init {inits[-1]:.2f}s   build + first chunk {firsts[-1]:.2f}s   "
              f"({firsts[-1] - inits[-1]:+.2f}s; its own ray.init {child['own_init_s']:.2f}s, after it "
              f"{afters[-1]:.2f}s; CPU of the process tree meanwhile {child['cpu_s']:.1f}s)   "
              f"phases {', '.join(f'{k[:-2]} {v:.2f}' for k, v in child['phases'].items())}")
    init_s, first = sorted(inits)[len(inits) // 2], sorted(firsts)[len(firsts) // 2]
    after = sorted(afters)[len(afters) // 2]
    print(f"  median: ray.init {init_s:.2f}s   build + first chunk {first:.2f}s   overhead {first - init_s:+.2f}s "
          f"(target <= +2.0s: {'PASS' if first - init_s <= 2.0 else 'FAIL'}); after the run's own ray.init "
          f"{after:+.2f}s ({'PASS' if after <= 2.0 else 'FAIL'})")
    print("\n4. memory: PSS of the driver + its Ray processes with 2 env workers (target <= 1024 MiB), last run")
    report_pss("at the first chunk", child["pss_first"], child["cpu_first"])
    report_pss("after two learn + sync iterations (steady state)", child["pss_steady"], child["cpu_steady"])


def byte_compile_sources() -> None:
    """Write the ``.pyc`` files of this checkout's packages, as a pip install (or any first import) would.

    Under ``PYTHONDONTWRITEBYTECODE`` (set on this project's CI machines) an editable install never gets them,
    so every fresh driver and Ray worker would compile rlightning's modules from source (~0.3 s of each
    start-up here), which no installed copy does.
    """
    import compileall

    if not sys.dont_write_bytecode:
        return
    dirs = [p.parent for p in [ROOT / "rlightning_core/__init__.py", ROOT / "rlightning_cli/__init__.py",
                               *sorted(ROOT.glob("plugins/*/rlightning_*/__init__.py"))] if p.is_file()]
    ok = all(compileall.compile_dir(str(d), quiet=1) for d in dirs)
    print(f"  byte-compiled {len(dirs)} package directories first (PYTHONDONTWRITEBYTECODE is set)"
          f"{'' if ok else ': some failed'}")


def startup_child(part: str, num_learners: int, memory: bool) -> None:
    """One start-up measurement in this fresh interpreter; prints a JSON object."""
    import json

    if part == "init":
        t0 = time.perf_counter()
        ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1", logging_level="ERROR")
        print(json.dumps({"init_s": time.perf_counter() - t0}))
        ray.shutdown()
        return
    config = cartpole("cluster.mode=ray", "env.num_workers=2", "env.num_envs=4", "cluster.num_cpus=4",
                      f"cluster.num_learners={num_learners}")
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    engine = build(config)
    engine.execution.reset(0)
    engine.execution.collect(1)
    first = time.perf_counter() - t0
    cpu = process_tree_cpu_s()
    result = {"first_s": first, "own_init_s": engine.env_group.cluster_handle.init_s,
              "cpu_s": sum(cpu.values()) - cpu0,  # the Ray processes all started after t0; the driver before not
              "phases": engine.execution.startup}
    if memory:
        result["pss_first"], result["cpu_first"] = process_tree_pss_mib(), cpu
        ex = engine.execution  # a steady state: two iterations
        steps = engine.config.engine.params.rollout_steps
        for it in range(2):
            ex.collect(steps)
            ex.learn(it / 100)
            ex.sync()
        ex.collect(steps)
        result["pss_steady"], result["cpu_steady"] = process_tree_pss_mib(), process_tree_cpu_s()
    engine.execution.close()
    engine.env_group.close()
    print(json.dumps(result))


def report_pss(when: str, pss: dict[str, float], cpu: dict[str, float]) -> None:
    """Print the total and the biggest processes (PSS MiB, CPU seconds used so far)."""
    total = sum(pss.values())
    print(f"  {when}: {total:.0f} MiB ({'PASS' if total <= 1024 else 'FAIL'})")
    for name, mib in sorted(pss.items(), key=lambda kv: -kv[1])[:12]:
        print(f"    {mib:7.0f} MiB  {cpu.get(name, 0.0):5.1f} s CPU  {name}")


def process_tree_cpu_s() -> dict[str, float]:
    """CPU seconds (user + system) used so far by each process of this driver's tree, keyed like
    :func:`process_tree_pss_mib`."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for name in process_tree_pss_mib():
        pid = name.split()[0]
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[name] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, ValueError, IndexError):
            continue
    return out


def process_tree_pss_mib() -> dict[str, float]:
    """PSS (proportional set size: shared pages split between the processes sharing them) per process of this
    driver and its descendants (the Ray cluster it started: GCS, raylet, agents, workers), from
    /proc/*/smaps_rollup. Other Ray clusters on the machine are not counted."""
    parent: dict[int, int] = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:  # the field after the parenthesised command name: state, then the parent pid
                parent[int(pid)] = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    tree = {os.getpid()}
    grown = True
    while grown:
        new = {p for p, pp in parent.items() if pp in tree and p not in tree}
        tree |= new
        grown = bool(new)
    out: dict[str, float] = {}
    for pid in map(str, sorted(tree)):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    out[f"{pid} {cmd[:70]}"] = int(line.split()[1]) / 1024
        except (OSError, ValueError):
            continue
    return out


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", nargs="*", type=int, default=[1, 2, 4, 8])
    parser.add_argument("--steps", type=int, default=2048, help="env steps per worker in the scaling runs")
    parser.add_argument("--overhead-steps", type=int, default=30720)
    parser.add_argument("--overhead-repeats", type=int, default=3, help="alternating local / ray rounds")
    parser.add_argument("--parts", nargs="*", default=["scaling", "overhead", "startup"],
                        help="startup also measures memory (parts 3 and 4)")
    parser.add_argument("--startup-repeats", type=int, default=3, help="alternating startup measurements")
    parser.add_argument("--num-learners", type=int, default=1,
                        help="startup and memory: learner actors (0: the learner in the driver)")
    parser.add_argument("--child", choices=["init", "first"], help=argparse.SUPPRESS)
    parser.add_argument("--memory", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        startup_child(args.child, args.num_learners, bool(args.memory))
        return
    print(f"load average {os.getloadavg()}")
    path = os.pathsep.join([BENCH, str(ROOT), os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=max(8, max(args.workers)) + 2, include_dashboard=False, _node_ip_address="127.0.0.1",
             logging_level="ERROR", log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    with tempfile.TemporaryDirectory() as tmp:
        if "scaling" in args.parts:
            scaling(args.workers, args.steps, Path(tmp))
        if "overhead" in args.parts:
            overhead(Path(tmp), args.overhead_steps, args.overhead_repeats)
        if "startup" in args.parts:
            startup(Path(tmp), args.startup_repeats, args.num_learners)
    ray.shutdown()


if __name__ == "__main__":
    main()
