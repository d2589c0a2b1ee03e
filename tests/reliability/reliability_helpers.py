"""Shared helpers of the reliability tests and the kill-loop harness (no pytest needed to import them)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE = ROOT / "examples" / "cartpole_ppo.yaml"
RLIGHTNING = Path(sys.executable).parent / "rlightning"

#: A CartPole PPO run small enough for a test: a few iterations, one quick evaluation, no progress bar.
SMALL = ("engine.total_steps=1024", "engine.eval_every=0", "engine.eval_episodes=1",
         "engine.target_eval_return=null", "logging.progress=false", "env[0].num_envs=4",
         "engine.params.rollout_steps=32")


def child_env(pythonpath: str = "", **extra: str) -> dict[str, str]:
    """Environment of a CLI subprocess: no RLIGHTNING_* leaking in, optional extra ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_") and k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    env.update(extra)
    return env


def run_cli(args: Sequence[str], *, timeout: float = 180, cwd: Path | None = None, pythonpath: str = "",
            **extra: str) -> subprocess.CompletedProcess[str]:
    """``rlightning ARGS`` as a user runs it; returns the finished process (output captured as text)."""
    return subprocess.run([str(RLIGHTNING), *args], env=child_env(pythonpath, **extra), capture_output=True,
                          text=True, timeout=timeout, check=False, cwd=cwd or ROOT)


def write_plugin_dist(site: Path, dist: str, module: str, source: Path) -> Path:
    """Write ``dist`` (module ``module`` copied from ``source``, one ``[rlightning]`` entry point) into ``site``:
    discovered by :mod:`importlib.metadata` exactly like a pip install once ``site`` is on the path."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
    info = site / f"{module}-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[rlightning]\n{dist} = {module}\n", encoding="utf-8")
    (info / "top_level.txt").write_text(f"{module}\n", encoding="utf-8")
    return site


def session_processes(sid: int) -> list[tuple[int, str]]:
    """``(pid, command line)`` of every live process in session ``sid`` (read from /proc; zombies excluded).

    A child started with ``start_new_session=True`` leads session ``sid == child.pid``; Ray's raylet, GCS and
    workers that a driver starts stay in its session, so anything left there after the driver exits leaked.
    """
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            state, session = fields[0], int(fields[3])
            if session != sid or state == "Z":
                continue
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        out.append((int(entry), cmd.strip()))
    return out


def wait_for_no_session_processes(sid: int, timeout: float = 120.0) -> list[tuple[int, str]]:
    """Poll until session ``sid`` is empty (Ray's processes take a moment to exit); returns what is left."""
    import time

    deadline = time.monotonic() + timeout
    left = session_processes(sid)
    while left and time.monotonic() < deadline:
        time.sleep(0.25)
        left = session_processes(sid)
    return left


def kill_session(sid: int) -> None:
    """SIGKILL whatever is left in session ``sid`` (cleanup after a failed assertion; never a broad name)."""
    import signal

    for pid, _ in session_processes(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
