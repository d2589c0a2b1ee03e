"""``rlightning export``: the TorchScript and ONNX files act like ``load_policy(run).predict`` (real CLI runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from rlightning_core.testing.observations import rollout_observations

pytestmark = pytest.mark.usefixtures("training_plugins")

ROOT = Path(__file__).resolve().parents[2]
RLIGHTNING = Path(sys.executable).parent / "rlightning"
BLOCKER = ROOT / "tests" / "fixtures" / "block_modules"
SMALL = ("engine.total_steps=1024", "engine.eval_every=0", "engine.target_eval_return=null",
         "logging.progress=false", "env[0].num_envs=4", "engine.params.rollout_steps=32",
         "preprocessors=[{type: normalize_obs}]")
#: run id -> (env id, example config, extra overrides): each in-tree policy, discrete and continuous actions.
RUNS = {"cartpole-ppo": ("CartPole-v1", "cartpole_ppo.yaml", ()),
        "pendulum-ppo": ("Pendulum-v1", "cartpole_ppo.yaml", ("env[0].params.id=Pendulum-v1",)),
        "pendulum-sac": ("Pendulum-v1", "pendulum_sac.yaml", ("policy.params.hidden_sizes=[64, 64]",
                                                               "policy.params.learning_starts=256")),
        "cartpole-dqn": ("CartPole-v1", "cartpole_dqn.yaml", ("policy.params.hidden_sizes=[64, 64]",
                                                               "policy.params.learning_starts=256"))}


def _cli(args: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_") and k != "PYTHONPATH"}
    env.update(extra)
    return subprocess.run([str(RLIGHTNING), *args], env=env, capture_output=True, text=True, timeout=600,
                          check=False, cwd=ROOT)


@pytest.fixture(scope="module", params=list(RUNS))
def run(request, tmp_path_factory) -> tuple[str, Path]:
    """A short run (with observation normalization) trained by the CLI; returns ``(env id, run dir)``."""
    env_id, example, extra = RUNS[request.param]
    run_dir = tmp_path_factory.mktemp("export") / "run"
    proc = _cli(["train", str(ROOT / "examples" / example), *SMALL, *extra, "--run-dir", str(run_dir)])
    assert proc.returncode == 0, proc.stderr
    return env_id, run_dir


def _observations(env_id: str, n: int = 1000, seed: int = 5) -> np.ndarray:
    return rollout_observations(env_id, n, seed)


def _assert_same(env_id: str, got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape
    if env_id == "CartPole-v1":  # discrete: exactly the same actions
        assert got.dtype == np.int64 and np.array_equal(got, expected)
        assert len(set(expected.tolist())) == 2, expected  # both actions occur: not a constant policy
    else:
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
        assert float(np.ptp(expected)) > 1e-3  # actions vary with the observation


def test_torchscript_and_onnx_act_like_predict(run, tmp_path):
    import onnxruntime as ort
    import torch

    from rlightning_core import load_policy

    env_id, run_dir = run
    obs = _observations(env_id)
    expected, _ = load_policy(run_dir).predict(obs)

    proc = _cli(["export", str(run_dir), "--format", "torchscript"])
    assert proc.returncode == 0, proc.stderr
    ts_file = run_dir / "export" / "policy.pt"
    assert f"model: {ts_file}" in proc.stdout
    scripted = torch.jit.load(str(ts_file))
    with torch.no_grad():
        _assert_same(env_id, scripted(torch.from_numpy(obs)).numpy(), expected)

    onnx_file = tmp_path / "deploy" / "policy.onnx"
    proc = _cli(["export", str(run_dir), "--format", "onnx", "-o", str(onnx_file)])
    assert proc.returncode == 0, proc.stderr
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    _assert_same(env_id, session.run(["action"], {"obs": obs})[0], expected)

    spec = json.loads(onnx_file.with_suffix(".json").read_text())
    assert spec["format"] == "onnx" and spec["preprocessors"] == ["NormalizeObs"]
    assert spec["inputs"][0]["name"] == "obs" and spec["inputs"][0]["shape"] == ["batch", *obs.shape[1:]]
    assert spec["inputs"][0]["dtype"] == "float32"
    action = spec["outputs"][0]
    assert action["name"] == "action" and action["shape"] == ["batch", *expected.shape[1:]]
    space = gym.make(env_id).action_space
    if env_id == "CartPole-v1":
        assert (action["kind"], action["dtype"], action["n"], action["low"], action["high"]) == (
            "discrete", "int64", 2, 0, 1)
    else:
        assert action["kind"] == "box" and action["dtype"] == "float32"
        assert action["low"] == space.low.tolist() and action["high"] == space.high.tolist()


def test_onnx_without_the_export_extra_is_a_user_error(run, tmp_path):
    _, run_dir = run
    proc = _cli(["export", str(run_dir), "--format", "onnx", "-o", str(tmp_path / "p.onnx")],
                PYTHONPATH=str(BLOCKER), RLIGHTNING_TEST_BLOCK_MODULES="onnx,onnxscript")
    assert proc.returncode == 2, proc.stderr
    assert "needs the Python module 'onnx'" in proc.stderr and "pip install 'rlightning[export]'" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "p.onnx").exists()
