"""Remote env round trip: steps/s through one env client (a separate process on loopback) vs the same env in-process.

Both sides step CartPole-v1 as a vector of ``--envs`` envs (default 8) with the same pre-drawn random actions:
in-process through ``GymnasiumWorker.step``, remote through ``RemoteEnvWorker.step`` (msgpack frames over TCP to
an ``rlightning env-client`` process that steps its own ``GymnasiumWorker``). Timing windows alternate local,
remote, local, ... so that load from other jobs hits both alike; medians are reported with the ratio and the
overhead per vector step (and per env step) in microseconds.

Run: ``python benchmarks/remote_env.py [--envs 8] [--steps 3000] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RLIGHTNING = Path(sys.executable).parent / "rlightning"
TOKEN = "benchmark-token"


def time_steps(worker, actions: np.ndarray) -> float:
    """Seconds to step ``worker`` once per row of ``actions``."""
    worker.reset(seed=0)
    start = time.perf_counter()
    for a in actions:
        worker.step(a)
    return time.perf_counter() - start


def start_remote(num_envs: int, log_dir: Path):
    """A one-client server in this process and its client process; returns (worker, client process)."""
    from rlightning_core.env.remote.params import RemoteEnvParams
    from rlightning_core.env.remote.worker import RemoteEnvWorker

    address_file = log_dir / "address.json"
    params = RemoteEnvParams(token=TOKEN, num_clients=1, address_file=str(address_file), connect_timeout_s=60)
    box: dict = {}
    thread = threading.Thread(target=lambda: box.setdefault("w", RemoteEnvWorker(params, num_envs=num_envs,
                                                                                 seed=0)), daemon=True)
    thread.start()
    while not address_file.exists():
        time.sleep(0.02)
    import json

    port = json.loads(address_file.read_text())["port"]
    env = {**os.environ, "RLIGHTNING_ENV_TOKEN": TOKEN}
    with open(log_dir / "client.log", "wb") as out:
        proc = subprocess.Popen([str(RLIGHTNING), "env-client", "--connect", f"127.0.0.1:{port}", "--num-envs",
                                 str(num_envs), "--log-level", "warning", "gymnasium:CartPole-v1"],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    thread.join(timeout=60)
    if "w" not in box:
        proc.send_signal(signal.SIGKILL)
        raise RuntimeError(f"the client did not connect; see {log_dir / 'client.log'}")
    return box["w"], proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=8, help="envs per client / in the local vector (default 8)")
    parser.add_argument("--steps", type=int, default=3000, help="vector steps per timing window (default 3000)")
    parser.add_argument("--repeat", type=int, default=5, help="timing windows per side (default 5)")
    args = parser.parse_args()

    from rlightning_gymnasium.params import GymnasiumParams
    from rlightning_gymnasium.worker import GymnasiumWorker

    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"Remote env round trip, CartPole-v1 x {args.envs} envs, {args.steps} steps x {args.repeat} windows")
    print(f"  load average {load} (1/5/15 min) on {os.cpu_count()} CPUs; Python {sys.version.split()[0]}")
    actions = np.random.default_rng(0).integers(0, 2, size=(args.steps, args.envs))
    local = GymnasiumWorker(GymnasiumParams(id="CartPole-v1"), num_envs=args.envs, seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        remote, proc = start_remote(args.envs, Path(tmp))
        try:
            time_steps(local, actions[:200])  # warm up both paths
            time_steps(remote, actions[:200])
            samples: dict[str, list[float]] = {"in-process": [], "remote (1 client)": []}
            for _ in range(args.repeat):
                samples["in-process"].append(args.steps / time_steps(local, actions))
                samples["remote (1 client)"].append(args.steps / time_steps(remote, actions))
        finally:
            remote.close()
            local.close()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)
    med = {k: statistics.median(v) for k, v in samples.items()}
    for name, values in samples.items():
        print(f"  {name:18s} {med[name]:9.0f} steps/s ({med[name] * args.envs:9.0f} env steps/s); windows: "
              + ", ".join(f"{v:.0f}" for v in values))
    local_sps, remote_sps = med["in-process"], med["remote (1 client)"]
    overhead_us = (1 / remote_sps - 1 / local_sps) * 1e6
    print(f"  ratio remote / in-process: {remote_sps / local_sps:.2f}x")
    print(f"  overhead per vector step: {overhead_us:.0f} us ({overhead_us / args.envs:.1f} us per env step)")


if __name__ == "__main__":
    main()
