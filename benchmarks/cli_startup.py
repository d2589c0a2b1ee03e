"""CLI startup time: ``rlightning list-plugins`` against ``python -c "import torch"``.

``list-plugins`` must stay light (no torch, no ray on its import path), so its wall time is compared with the
cost of merely importing torch, measured in the same run on the same machine. Target: ratio <= 0.3.

Run: ``python benchmarks/cli_startup.py [--repeat 5] [--target 0.3]``. Always exits 0; prints PASS or FAIL.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RLIGHTNING = Path(sys.executable).parent / "rlightning"


def wall_times(argv: list[str], repeat: int) -> list[float]:
    """Wall time of ``repeat`` runs of ``argv`` (output discarded); a failing run raises with its output."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", "-n", type=int, default=5, help="runs of each command (default 5)")
    parser.add_argument("--target", type=float, default=0.3, help="largest acceptable ratio (default 0.3)")
    args = parser.parse_args()

    if not RLIGHTNING.exists():
        print(f"console script not found: {RLIGHTNING} (install rlightning into this environment)")
        return
    commands = {
        "rlightning list-plugins": [str(RLIGHTNING), "list-plugins"],
        'python -c "import torch"': [sys.executable, "-c", "import torch"],
    }
    samples: dict[str, list[float]] = {name: [] for name in commands}
    try:
        # One untimed run each, so both start from a warm file-system cache.
        for argv in commands.values():
            wall_times(argv, 1)
        # Interleave the runs so that load on the machine affects both sides alike.
        for _ in range(args.repeat):
            for name, argv in commands.items():
                samples[name] += wall_times(argv, 1)
    except RuntimeError as exc:
        print(f"FAIL: {exc}")
        return

    python = sys.version.split()[0]
    print(f"CLI startup, median of {args.repeat} runs ({os.cpu_count()} CPUs, Python {python})")
    medians = {name: statistics.median(times) for name, times in samples.items()}
    for name, median in medians.items():
        spread = f"min {min(samples[name]):.3f} s, max {max(samples[name]):.3f} s"
        print(f"  {name:<28} {median:7.3f} s   ({spread})")
    cli, torch = medians.values()
    ratio = cli / torch
    verdict = "PASS" if ratio <= args.target else "FAIL"
    print(f"  ratio list-plugins / import torch = {ratio:.2f} (target <= {args.target}): {verdict}")


if __name__ == "__main__":
    main()
