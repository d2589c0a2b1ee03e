"""Helpers shared by the PPO benchmarks (not a benchmark itself; ``nox -s bench`` runs it as a no-op).

- :func:`setup` pins torch to one thread and prints the machine's state (load average first: timings on a
  shared 2-core machine mean little without it).
- :func:`run_rlightning` trains through the library API exactly as ``rlightning train`` does and returns the
  engine's own accounting (``train_s`` excludes evaluation, checkpoints and logging).
- :func:`interleave` runs compared variants A, B, A, B ... so that load from other jobs hits both alike.
"""

from __future__ import annotations

import logging
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CARTPOLE_CONFIG = ROOT / "examples" / "cartpole_ppo.yaml"

#: Overrides that turn the example into a pure training run: no evaluation on the way (the engine still
#: evaluates once at the end, outside ``train_s``), no periodic or final checkpoint, no progress bar.
NO_EXTRAS = ("engine.eval_every=0", "engine.target_eval_return=null", "checkpoint.every=0",
             "checkpoint.at_end=false", "logging.progress=false", "logging.level=WARNING")


def setup(title: str) -> None:
    """One torch thread, quiet loggers, and a header with load average, CPUs and versions."""
    import gymnasium
    import numpy as np
    import torch

    torch.set_num_threads(1)
    logging.getLogger("rlightning").setLevel(logging.WARNING)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(title)
    print(f"  load average {load} (1/5/15 min) on {os.cpu_count()} CPUs; Python {sys.version.split()[0]}, "
          f"torch {torch.__version__} ({torch.get_num_threads()} thread), gymnasium {gymnasium.__version__}, "
          f"numpy {np.__version__}")


def run_rlightning(overrides: Sequence[str], config: str | Path = CARTPOLE_CONFIG) -> dict[str, Any]:
    """Train once in this process (the ``rlightning train`` path: load_config -> builders -> engine.run).

    Returns the engine's numbers: ``train_s`` (iterations only), ``env_steps``, ``sps``, the phase profile
    split into ``collect_s`` (everything in an iteration before learning: env stepping, inference, buffer
    writes) and ``learn_s`` (GAE + gradient epochs + weight sync), ``eval_s``, ``stop_reason`` and the last
    evaluation return. The run directory is a temporary one, removed afterwards.
    """
    from rlightning_core import load_config
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

    cfg = load_config(config, overrides=list(overrides))
    env_group = build_env_group(cfg.env, seed=cfg.seed)
    policy_group = build_policy_group(cfg.policy.type, cfg.policy, cfg.cluster)
    buffer = build_data_buffer(cfg.buffer.type, cfg.buffer)
    engine = build_engine(cfg, env_group, policy_group, buffer)
    run_dir = tempfile.mkdtemp(prefix="rlightning-bench-")
    try:
        result = engine.run(run_dir)
    finally:
        env_group.close()
        shutil.rmtree(run_dir, ignore_errors=True)
    prof = result.profile
    learn_s = prof["learn"] + prof["sync"]
    return {
        "train_s": result.train_s,
        "env_steps": result.env_steps,
        "sps": result.env_steps / result.train_s,
        "collect_s": result.train_s - learn_s,
        "env_s": prof["env"],
        "inference_s": prof["inference"],
        "learn_s": learn_s,
        "eval_s": prof["eval"],
        "stop_reason": result.stop_reason,
        "last_eval": result.last_eval_return,
        "solved": result.stop_reason == "target_eval_return",
    }


def interleave(variants: dict[str, Callable[[int], dict[str, Any]]], repeats: int,
               verbose: bool = True) -> dict[str, list[dict[str, Any]]]:
    """Run every variant ``repeats`` times, alternating (A, B, A, B ...); ``fn(i)`` gets the repeat index."""
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for i in range(repeats):
        for name, fn in variants.items():
            row = fn(i)
            out[name].append(row)
            if verbose:
                load = os.getloadavg()[0]
                print(f"    [{i + 1}/{repeats}] {name:<22} {row['sps']:8,.0f} steps/s  "
                      f"({row['env_steps']:,} steps in {row['train_s']:.2f} s; load {load:.2f})", flush=True)
    return out


def med(rows: Sequence[dict[str, Any]], key: str) -> float:
    """Median of ``row[key]`` over rows (``nan`` when none has it)."""
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else float("nan")


def verdict(ok: bool) -> str:
    """``PASS`` / ``FAIL``."""
    return "PASS" if ok else "FAIL"


if __name__ == "__main__":
    print("benchmarks/_common.py: shared helpers, nothing to measure")
