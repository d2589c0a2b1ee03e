"""A private local cluster started by a run listens on loopback only.

The run (the ``rlightning`` console script) is held after its first checkpoint by the hold test plugin
(tests/fixtures/hold_plugin.py), so its cluster is fully up — GCS, raylet, dashboard agent, runtime-env agent,
the env-runner and learner workers — when the test reads the listening sockets of every process the run started.
Those are found by a marker in their environment: Ray's temp root (``RAY_TMPDIR``), fresh for the test and
inherited by every Ray process. Every one of them is killed at the end.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from marked_processes import kill_all, started_with

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.usefixtures("training_plugins")]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CONFIG = ROOT / "examples" / "cartpole_ppo_ray.yaml"


def _listening(pid: int) -> set[str]:
    import psutil

    try:
        return {c.laddr.ip for c in psutil.Process(pid).net_connections(kind="inet")
                if c.status == psutil.CONN_LISTEN}
    except psutil.NoSuchProcess:
        return set()


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    mapped = getattr(addr, "ipv4_mapped", None)  # "::ffff:127.0.0.1": an IPv6 socket bound to 127.0.0.1
    return (mapped or addr).is_loopback


def test_a_private_cluster_listens_on_loopback_only(tmp_path, plugin_site_factory, cli_environment):
    psutil = pytest.importorskip("psutil")
    site = plugin_site_factory("hold")
    site("rlightning-test-hold", "1.0", "rlightning_test_hold",
         (ROOT / "tests" / "fixtures" / "hold_plugin.py").read_text(encoding="utf-8"))
    root = Path(tempfile.mkdtemp(prefix="rll-", dir="/tmp"))  # short: Ray's socket paths live under it
    marker = f"RAY_TMPDIR={root}"
    held = tmp_path / "held"
    env = {k: v for k, v in cli_environment(site.pythonpath).items()
           if k not in ("RAY_ADDRESS", "TMPDIR", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    env.update(RAY_TMPDIR=str(root), RLIGHTNING_TEST_HOLD_AT_STEP="256", RLIGHTNING_TEST_HOLD_MARKER=str(held))
    log = tmp_path / "run.log"
    run: subprocess.Popen[bytes] | None = None
    try:
        with open(log, "wb") as out:  # one iteration is 32 steps x 2 workers x 4 envs = 256 env steps
            run = subprocess.Popen([str(BIN / "rlightning"), "train", str(CONFIG), "engine.total_steps=100000",
                                    "engine.eval_every=0", "checkpoint.every=1", "logging.progress=false",
                                    # broadcast's torch.distributed store listens on all interfaces (docs/ray.md)
                                    "cluster.weight_sync=object_store",
                                    "--run-dir", str(tmp_path / "run")], env=env, cwd=ROOT, stdout=out,
                                   stderr=subprocess.STDOUT)
        while not held.exists():  # the event: the run holds after its first checkpoint, its cluster all up
            assert run.poll() is None, f"the run ended before its first checkpoint:\n{log.read_text()[-3000:]}"
            time.sleep(0.2)
        pids = started_with(marker)
        names = {pid: psutil.Process(pid).name() for pid in pids}
        listening = {pid: _listening(pid) for pid in pids}
        servers = {names[pid] for pid, ips in listening.items() if ips}
        assert {"gcs_server", "raylet"} <= servers, names  # the cluster's own servers were seen ...
        exposed = {f"{names[pid]} ({pid})": sorted(ips) for pid, ips in listening.items()
                   if not all(_loopback(ip) for ip in ips)}
        assert not exposed, exposed  # ... and nothing listens beyond loopback
    finally:
        kill_all(marker)
        if run is not None:
            run.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)
