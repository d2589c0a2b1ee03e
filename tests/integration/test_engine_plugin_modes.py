"""An engine plugin written against the execution contract trains with the same config in local mode and on Ray.

The plugin (tests/fixtures/contract_engine_plugin.py) is installed as a real distribution on ``PYTHONPATH`` and
run through the ``rlightning`` executable, as a user runs a third-party engine; on Ray the run starts its own
private local cluster (3 CPUs, no dashboard) and shuts it down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
RLIGHTNING = Path(sys.executable).parent / "rlightning"
FIXTURE = ROOT / "tests" / "fixtures" / "contract_engine_plugin.py"
MODULE = "rlightning_test_contract_engine"

pytestmark = pytest.mark.usefixtures("training_plugins")

CONFIG = """
seed: 3
env: {type: gymnasium, params: {id: CartPole-v1}, num_workers: 2, num_envs: 4}
policy: {type: ppo, params: {hidden_sizes: [64, 64], lr: 3.0e-3, epochs: 2, minibatch_size: 64, ent_coef: 0.0}}
engine: {type: contract-loop, params: {rollout_steps: 32}, total_steps: 6144, eval_every: 0, eval_episodes: 2}
checkpoint: {every: 1, keep_last: 100}
logging: {progress: false}
"""


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """The fixture engine as an installed distribution (dist-info with an ``[rlightning]`` entry point)."""
    site = tmp_path_factory.mktemp("contract-engine-site")
    (site / f"{MODULE}.py").write_text(FIXTURE.read_text(encoding="utf-8"), encoding="utf-8")
    info = site / f"{MODULE}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rlightning-test-contract-engine\nVersion: 1.0\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[rlightning]\nrlightning-test-contract-engine = {MODULE}\n",
                                           encoding="utf-8")
    return site


def _train(tmp_path: Path, site: Path, *overrides: str) -> Path:
    config = tmp_path / "contract.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_") and k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)  # the driver and the Ray workers it starts find the plugin the same way
    proc = subprocess.run([str(RLIGHTNING), "train", str(config), *overrides, "--run-dir", str(run_dir)],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return run_dir


def _learner_weights(path: Path) -> dict[str, np.ndarray]:
    from rlightning_core.checkpoint.manager import load_newest

    modules = load_newest(path).state["policy"]["learner"]["modules"]
    return {f"{m}.{k}": v.numpy() for m, tensors in modules.items() for k, v in tensors.items()}


@pytest.mark.parametrize("mode", ["local", pytest.param("ray", marks=pytest.mark.ray)])
def test_a_contract_engine_plugin_trains_in_both_modes(tmp_path, plugin_site, mode):
    overrides = ("cluster.mode=ray", "cluster.num_cpus=3") if mode == "ray" else ()
    run_dir = _train(tmp_path, plugin_site, *overrides)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    iterations = [r for r in rows if "iteration" in r]
    assert len(iterations) == 6144 // (32 * 8)
    versions = [r["perf/weight_version"] for r in iterations]
    assert np.all(np.diff(versions) == 1), versions  # one sync per iteration
    assert all(r["contract/chunks"] == 2.0 for r in iterations)  # a chunk from each of the 2 runners
    assert all("loss/policy" in r for r in iterations)  # learn() learned in the driver's loop, both modes
    checkpoints = sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))
    first, last = _learner_weights(checkpoints[0]), _learner_weights(checkpoints[-1])
    assert any(not np.array_equal(first[k], last[k]) for k in first)  # the weights moved
    returns = [r["rollout/episode_return_mean"] for r in iterations if "rollout/episode_return_mean" in r]
    assert iterations[-1]["step"] == 6144  # every env step counted
    assert np.mean(returns[-3:]) > 2 * np.mean(returns[:3]), returns  # CartPole: it learned to balance
