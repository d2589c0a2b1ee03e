"""A ray-mode run on a machine where ``ray start --head`` already runs a cluster.

``cluster.address`` unset starts a private cluster (and says one is running); ``cluster.address: auto`` and the
``RAY_ADDRESS`` environment variable join the running one. The head here is private to the test: Ray's temp root
(``RAY_TMPDIR``) is a fresh directory, given to ``ray start`` and to the ``rlightning`` subprocess alike, so the
``ray_current_cluster`` file it writes is seen by them only (another process's ``ray.init()`` on this machine
reads the default one). Every process started with that environment is killed at the end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from marked_processes import kill_all

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CONFIG = ROOT / "examples" / "cartpole_ppo_ray.yaml"
#: One iteration (32 steps x 2 workers x 4 envs), one evaluation episode, quiet.
SHORT = ("engine.total_steps=256", "engine.eval_every=0", "engine.eval_episodes=1", "logging.progress=false",
         "checkpoint.every=0")


@pytest.fixture
def ray_head():
    """A ``ray start --head`` cluster (3 CPUs) under a private temp root; yields ``(env, root, address)``."""
    if not Path("/proc/self/environ").exists():
        pytest.skip("needs /proc to find the head's processes")
    root = Path(tempfile.mkdtemp(prefix="rlh-", dir="/tmp"))  # short: Ray's socket paths live under it
    marker = f"RAY_TMPDIR={root}"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "TMPDIR")}
    env["RAY_TMPDIR"] = str(root)
    address_file = root / "ray" / "ray_current_cluster"
    log = root / "head.log"
    head: subprocess.Popen[bytes] | None = None
    try:
        with open(log, "wb") as out:
            head = subprocess.Popen([str(BIN / "ray"), "start", "--head", "--port=0", "--num-cpus=3",
                                     "--include-dashboard=false", "--disable-usage-stats", "--block"],
                                    env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        end = time.monotonic() + 180
        while not (address_file.exists() and address_file.read_text().strip()):
            if head.poll() is not None or time.monotonic() > end:
                pytest.fail(f"ray start --head did not come up:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        sessions = {p.name for p in (root / "ray").glob("session_2*")}
        assert len(sessions) == 1
        yield env, root, address_file.read_text().strip()
        assert head.poll() is None, "the run stopped the cluster it did not start"
    finally:
        kill_all(marker)
        if head is not None:
            head.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def _train(env: dict[str, str], run_dir: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "rlightning"), "train", str(CONFIG), *SHORT, *overrides, "--run-dir",
                           str(run_dir)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)


def _driver_logs(session: Path) -> list[Path]:
    return sorted((session / "logs").glob("python-core-driver-*"))


def _head_session(root: Path) -> Path:
    return min((root / "ray").glob("session_2*"), key=lambda p: p.stat().st_mtime)


def test_without_an_address_the_run_starts_a_private_cluster_and_says_one_runs(ray_head, tmp_path):
    env, root, address = ray_head
    head_session = _head_session(root)
    proc = _train(env, tmp_path / "run")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr
    assert f"a cluster started with `ray start` is recorded on this machine ({address})" in proc.stderr
    assert "cluster.address: auto joins that one" in proc.stderr
    assert not _driver_logs(head_session)  # nothing connected to the head ...
    others = [p for p in (root / "ray").glob("session_2*") if p != head_session]
    assert len(others) == 1 and _driver_logs(others[0])  # ... the run had a cluster of its own


def test_cluster_address_auto_joins_the_running_cluster(ray_head, tmp_path):
    env, root, _ = ray_head
    head_session = _head_session(root)
    proc = _train(env, tmp_path / "run", "cluster.address=auto")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "joins the Ray cluster running on this machine (cluster.address: auto)" in proc.stderr
    assert _driver_logs(head_session)
    assert [p for p in (root / "ray").glob("session_2*")] == [head_session]


def test_ray_address_in_the_environment_joins_that_cluster(ray_head, tmp_path):
    env, root, address = ray_head
    head_session = _head_session(root)
    # as ray job submit gives a job's driver: the address, and token auth (Ray's default for `ray start`)
    proc = _train({**env, "RAY_ADDRESS": address, "RAY_AUTH_MODE": "token"}, tmp_path / "run")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr
    assert f"joins the Ray cluster at {address} (the RAY_ADDRESS environment variable" in proc.stderr
    assert _driver_logs(head_session)
    assert [p for p in (root / "ray").glob("session_2*")] == [head_session]
