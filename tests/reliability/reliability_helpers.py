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
