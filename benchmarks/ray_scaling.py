"""Ray mode: scaling with env runners on a slow env, overhead against local mode, start-up time, memory.

1. Scaling: a CartPole that sleeps 5 ms per step; collection SPS (``perf/collect_sps``: env steps of an
   iteration over the wall time of its collect phase, learn and sync excluded; median after the first
   iteration) with K = 1, 2, 4, 8 env-runner actors of 1 env each, against K = 1 of the same run.
   Target at K = 8: >= 0.95 * K on one node; ``multinode``: the same runs on a simulated cluster
   (``ray.cluster_utils.Cluster``: a 0-CPU head and 4 worker nodes, joined through ``cluster.address``,
   ``cluster.placement: disaggregate``), >= 0.9 * K. Beside each K: the CPU share this run's processes got
   and how busy the whole machine was.
2. Overhead: CartPole PPO SPS (whole training loop) in ray mode with 2 env-runner actors of 4 envs vs local
   mode with the same 8 envs, alternating rounds. Target: >= 0.8. Beside it (report only): the learner in the
   driver, and the inference-server topology.
3. Start-up: ``rlightning train ... cluster.mode=ray`` from its launch to the first env step (a CartPole that
   stamps it), against ``import ray; ray.init`` in a fresh process from its launch, alternating, medians, with
   the CPU seconds of each process tree. Target: <= ray.init + 2 s.
4. Memory: PSS of the last CLI run's process tree (driver, its Ray daemons and workers) at its first env step
   and after two iterations. Target: <= 1.0 GiB.

Parts 3 and 4 run the default learner actor; ``--startup-learners 0 1`` measures the learner in the driver
too, alternating with the actor in each round.

    python benchmarks/ray_scaling.py [--workers 1 2 4 8] [--steps 2048]
                                     [--parts scaling multinode overhead startup] [--startup-repeats 3]
                                     [--startup-learners 1]

Every cluster it starts is private (``address="local"``, or its own ``RAY_TMPDIR`` for the simulated one).
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


def scaling(workers: list[int], steps_per_worker: int, tmp: Path, *overrides: str, gate: float = 0.95,
            title: str = "one node") -> dict[int, float]:
    """Collection SPS (env steps per second of the collect phase: every runner steps its env ``rollout_steps``
    times and its chunk reaches the learner side; learn and sync excluded) with K env runners of 1 env each,
    median over the iterations after the first. Returns SPS by K."""
    print(f"\n1. scaling, {title}: SleepyCartPole (5 ms/step), 1 env per runner, collection SPS")
    out: dict[int, float] = {}
    for k in workers:
        cfg = cartpole("cluster.mode=ray", "env.params.id=_sleepy_env:SleepyCartPole-v0", f"env.num_workers={k}",
                       "env.num_envs=1", "engine.params.rollout_steps=64", "policy.params.epochs=1",
                       "policy.params.minibatch_size=64", f"engine.total_steps={steps_per_worker * k}",
                       "env.num_cpus=0.5", *overrides)
        cpu0, (busy0, all0), t0 = tree_cpu_s(os.getpid()), machine_cpu_s(), time.perf_counter()
        engine = build(cfg)
        run_dir = tmp / f"scale-{abs(hash(overrides))}-{k}"
        result = engine.run(run_dir)
        engine.env_group.close()
        wall, cpu, (busy1, all1) = time.perf_counter() - t0, tree_cpu_s(os.getpid()) - cpu0, machine_cpu_s()
        out[k] = collect_sps(run_dir)
        base = out[workers[0]] / workers[0]
        cores = (all1 - all0) / wall
        print(f"  K={k}: {out[k]:8.0f} steps/s   x{out[k] / base:4.2f} of K=1 (ideal x{k})   this run's processes: "
              f"{cpu / wall:.2f} cores, {1000 * cpu / result.env_steps:.2f} ms CPU per env step; the machine: "
              f"{(busy1 - busy0) / wall:.2f} of {cores:.0f} cores busy", flush=True)
    k = workers[-1]
    if k > 1 and workers[0] == 1:
        ratio = out[k] / out[1] / k
        print(f"  target at K={k}: >= {gate}*K -> {ratio:.2f}*K {'PASS' if ratio >= gate else 'FAIL'}")
    return out


def scaling_multinode(workers: list[int], steps_per_worker: int, tmp: Path, one_node: dict[int, float],
                      nodes: int = 4) -> None:
    """Part 1 on a simulated cluster (``ray.cluster_utils.Cluster``): a head with 0 CPUs and ``nodes`` worker
    nodes of 2 CPUs, each its own raylet and object store on this machine; every run joins it through
    ``cluster.address`` with ``cluster.placement: disaggregate`` (one bundle per actor, spread over the nodes)."""
    import shutil
    import tempfile

    from ray.cluster_utils import Cluster

    ray.shutdown()
    # the nodes' workers inherit this environment: they import _sleepy_env from benchmarks/
    os.environ["PYTHONPATH"] = os.pathsep.join([BENCH, str(ROOT), os.environ.get("PYTHONPATH", "")])
    root = tempfile.mkdtemp(prefix="rlbmn-", dir="/tmp")  # its own RAY_TMPDIR: no other process joins it
    previous = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = root
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(nodes):
            cluster.add_node(num_cpus=2, include_dashboard=False)
        cluster.wait_for_nodes()
        title = f"{nodes} worker nodes + a 0-CPU head, placement: disaggregate"
        out = scaling(workers, steps_per_worker, tmp, f"cluster.address={cluster.address}",
                      "cluster.placement=disaggregate", gate=0.9, title=title)
        k = workers[-1]
        if 1 in one_node and k in out:
            print(f"  against the one-node K=1 of this run ({one_node[1]:.0f} steps/s): "
                  f"{out[k] / one_node[1] / k:.2f}*K")
    finally:
        ray.shutdown()
        cluster.shutdown()
        if previous is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = previous
        shutil.rmtree(root, ignore_errors=True)


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


def startup(tmp: Path, repeats: int = 1, learners: tuple[int, ...] = (1,)) -> None:
    """Parts 3 and 4: ``rlightning train`` (CLI -> first env step) against a fresh interpreter's ``import ray;
    ray.init``, each timed from the moment its process is launched, alternating; then the PSS of the CLI run's
    process tree (the driver, the Ray daemons it started and their workers). Each round runs the CLI once per
    value of ``learners`` (``cluster.num_learners``)."""
    import json
    import subprocess

    print(f"\n3. startup: CLI `rlightning train ... cluster.mode=ray` (2 env runners x 4 envs) -> first env step, "
          f"vs `python -c 'import ray; ray.init(...)'`, both timed from process launch ({repeats}x alternating, "
          f"fresh processes, medians)")
    ray.shutdown()
    byte_compile_sources()
    cli = str(Path(sys.executable).parent / "rlightning")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([BENCH, str(ROOT), os.environ.get("PYTHONPATH", "")])}
    import resource

    inits: list[float] = []
    init_cpus: list[float] = []
    firsts: dict[int, list[float]] = {n: [] for n in learners}
    first_cpus: dict[int, list[float]] = {n: [] for n in learners}
    pss_first: dict[int, dict[str, float]] = {}
    cpu_at_first: dict[int, dict[str, float]] = {}
    pss_steady: dict[int, dict[str, float]] = {}
    for i in range(repeats):
        t0, ru0 = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run([sys.executable, __file__, "--child", "init"], capture_output=True, text=True,
                             timeout=600, cwd=ROOT, env=env)
        if out.returncode:
            raise RuntimeError(f"ray.init child failed:\n{out.stderr[-3000:]}")
        inits.append(json.loads(out.stdout.strip().splitlines()[-1])["t_done"] - t0)
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the child and its Ray daemons, shutdown included
        init_cpus.append(ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime)
        for n in learners:
            first_s, cpu_first, pss = cli_first_step(tmp / f"cli-{i}-{n}", n, cli, env, i == repeats - 1)
            firsts[n].append(first_s)
            first_cpus[n].append(sum(cpu_first.values()))
            if pss is not None:
                cpu_at_first[n], (pss_first[n], pss_steady[n]) = cpu_first, pss
            print(f"  run {i + 1}, cluster.num_learners={n}: import ray + ray.init {inits[-1]:.2f}s   CLI -> first "
                  f"env step {first_s:.2f}s   ({first_s - inits[-1]:+.2f}s)   CPU of the process trees: ray.init "
                  f"(with its shutdown) {init_cpus[-1]:.1f}s, CLI to its first env step {first_cpus[n][-1]:.1f}s",
                  flush=True)
    init_s = sorted(inits)[len(inits) // 2]
    for n in learners:
        first_s = sorted(firsts[n])[len(firsts[n]) // 2]
        print(f"  median, cluster.num_learners={n}: import ray + ray.init {init_s:.2f}s   CLI -> first env step "
              f"{first_s:.2f}s   overhead {first_s - init_s:+.2f}s (target <= +2.0s: "
              f"{'PASS' if first_s - init_s <= 2.0 else 'FAIL'})")
    for n in learners:
        print(f"\n4. memory, cluster.num_learners={n}: PSS of that CLI run's process tree (driver + its Ray daemons "
              "+ workers; target <= 1024 MiB), last run")
        report_pss("at the first env step (with each process's CPU seconds until then)", pss_first[n],
                   cpu_at_first[n])
        report_pss("after two training iterations (steady state)", pss_steady[n])


def cli_first_step(run_dir: Path, learners: int, cli: str, env: dict[str, str], memory: bool
                   ) -> tuple[float, dict[str, float], tuple[dict[str, float], dict[str, float]] | None]:
    """One CLI run from launch to its first env step: ``(seconds, CPU seconds per process, PSS)``.

    With ``memory``, the PSS of its process tree at the first step and after two iterations (else ``None``).
    """
    import json
    import signal
    import subprocess

    stamp = run_dir.with_suffix(".first-step.json")
    args = [cli, "train", str(ROOT / "examples" / "cartpole_ppo.yaml"), "--run-dir", str(run_dir),
            "cluster.mode=ray", "cluster.num_cpus=4", f"cluster.num_learners={learners}", "env.num_workers=2",
            "env.num_envs=4", "env.params.id=_sleepy_env:StampedCartPole-v0", "engine.total_steps=100000000",
            "engine.eval_every=0", "checkpoint.every=0", "checkpoint.at_end=false", "logging.progress=false"]
    t0 = time.time()
    proc = subprocess.Popen(args, cwd=ROOT, env={**env, "RLBENCH_FIRST_STEP": str(stamp)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    pss = None
    try:
        first = wait_for(lambda: json.loads(stamp.read_text()), proc)
        cpu_first = cpu_by_process(proc.pid)  # read a poll later than the step itself
        if first["pid"] == proc.pid:
            print("  (the first step was the CLI process's own, not an env runner's)")
        if memory:  # at its first step, then after two iterations
            at_first = process_tree_pss_mib(proc.pid)
            wait_for(lambda: len((run_dir / "metrics.jsonl").read_text().splitlines()) >= 3 or None, proc)
            pss = (at_first, process_tree_pss_mib(proc.pid))
    finally:
        proc.send_signal(signal.SIGTERM)  # a clean stop: the run releases its actors and its Ray cluster
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    if proc.returncode not in (0, 130, 143, -15):
        print(f"  CLI run exited {proc.returncode}: {err[-2000:]}")
    return first["t"] - t0, cpu_first, pss


def wait_for(probe, proc, guard_s: float = 600.0):
    """Poll ``probe`` until it returns a value (it may raise while the event has not happened), failing if
    ``proc`` exits first. ``guard_s`` only stops a hung run."""
    deadline = time.monotonic() + guard_s
    while True:
        try:
            value = probe()
            if value is not None:
                return value
        except (OSError, ValueError):
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"the CLI run exited {proc.returncode} first:\n{proc.stderr.read()[-3000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing after {guard_s:.0f} s")
        time.sleep(0.01)


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


def startup_child() -> None:
    """The reference of part 3, in this fresh interpreter: ``ray.init`` as a run starts its private cluster;
    prints the wall-clock time it returned (``ray`` was imported at the top of this module)."""
    import json

    ray.init(address="local", num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1",
             logging_level="ERROR")
    print(json.dumps({"t_done": time.time()}))
    ray.shutdown()


def report_pss(when: str, pss: dict[str, float], cpu: dict[str, float] | None = None) -> None:
    """Print the total and the biggest processes (PSS MiB, and CPU seconds when given)."""
    total = sum(pss.values())
    print(f"  {when}: {total:.0f} MiB in {len(pss)} processes ({'PASS' if total <= 1024 else 'FAIL'})")
    for name, mib in sorted(pss.items(), key=lambda kv: -kv[1])[:12]:
        used = f"  {cpu.get(name, 0.0):5.1f} s CPU" if cpu is not None else ""
        print(f"    {mib:7.0f} MiB{used}  {name}")


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) used so far by ``root`` and its descendants, with their reaped children (a
    Ray worker that exited counts in its raylet's)."""
    return sum(cpu_by_process(root).values())


def cpu_by_process(root: int) -> dict[str, float]:
    """CPU seconds of each process of :func:`tree_cpu_s`, keyed like :func:`process_tree_pss_mib`."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for pid in process_tree(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            out[f"{pid} {cmd[:70]}"] = sum(int(x) for x in fields[11:15]) / tick
        except (OSError, ValueError, IndexError):
            continue
    return out


def machine_cpu_s() -> tuple[float, float]:
    """(busy, all) CPU seconds of the whole machine so far, from /proc/stat: what every process used."""
    values = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    idle = values[3] + values[4]
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(values) - idle) / tick, sum(values) / tick


def process_tree(root: int) -> list[int]:
    """``root`` and its live descendants."""
    parent: dict[int, int] = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:  # the field after the parenthesised command name: state, then the parent pid
                parent[int(pid)] = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    tree = {root}
    grown = True
    while grown:
        new = {p for p, pp in parent.items() if pp in tree and p not in tree}
        tree |= new
        grown = bool(new)
    return sorted(tree)


def process_tree_pss_mib(root: int) -> dict[str, float]:
    """PSS (proportional set size: shared pages split between the processes sharing them) per process of the
    run ``root`` and its descendants (the Ray cluster it started: GCS, raylet, agents, workers), from
    /proc/*/smaps_rollup. Other Ray clusters on the machine are not counted."""
    out: dict[str, float] = {}
    for pid in map(str, process_tree(root)):
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
    parser.add_argument("--parts", nargs="*", default=["scaling", "multinode", "overhead", "startup"],
                        help="multinode: part 1 on a 4-node simulated cluster; startup also measures memory "
                             "(parts 3 and 4)")
    parser.add_argument("--startup-repeats", type=int, default=3, help="alternating startup measurements")
    parser.add_argument("--startup-learners", nargs="*", type=int, default=[1],
                        help="cluster.num_learners of the start-up runs (each in every round)")
    parser.add_argument("--child", choices=["init"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        startup_child()
        return
    print(f"load average {os.getloadavg()}", flush=True)
    path = os.pathsep.join([BENCH, str(ROOT), os.environ.get("PYTHONPATH", "")])
    with tempfile.TemporaryDirectory() as tmp:
        one_node: dict[int, float] = {}
        if {"scaling", "overhead"} & set(args.parts):
            ray.init(address="local", num_cpus=max(8, max(args.workers)) + 2, include_dashboard=False,
                     _node_ip_address="127.0.0.1", logging_level="ERROR", log_to_driver=False,
                     runtime_env={"env_vars": {"PYTHONPATH": path}})
        if "scaling" in args.parts:
            one_node = scaling(args.workers, args.steps, Path(tmp))
        if "overhead" in args.parts:
            overhead(Path(tmp), args.overhead_steps, args.overhead_repeats)
        ray.shutdown()
        if "multinode" in args.parts:
            scaling_multinode(args.workers, args.steps, Path(tmp), one_node)
        if "startup" in args.parts:
            startup(Path(tmp), args.startup_repeats, tuple(args.startup_learners))
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
