"""PPO on MultiDiscrete actions end to end (local learning, a Ray run) and unsupported spaces as config errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.usefixtures("training_plugins")

ROOT = Path(__file__).resolve().parents[2]


def example(*overrides: str):
    from rlightning_core import load_config

    return load_config(ROOT / "examples" / "multidiscrete_ppo.yaml", ["logging.progress=false", *overrides])


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_ppo_learns_multidiscrete_actions(tmp_path, build_run):
    """examples/multidiscrete_ppo.yaml for 4096 steps: the sampling policy's return climbs from random (~2.3 of 8)
    to nearly every dimension right."""
    engine = build_run(example("engine.total_steps=4096", "engine.eval_every=0", "engine.target_eval_return=null"))
    engine.run(tmp_path / "run")
    returns = [r["rollout/episode_return_mean"] for r in rows(tmp_path / "run") if "rollout/episode_return_mean" in r]
    assert returns[0] < 3.0  # a random factorised policy: 8 * mean(1/3, 1/4)
    assert np.mean(returns[-3:]) >= 7.5, returns


@pytest.mark.ray
def test_ppo_multidiscrete_on_ray(ray_cluster, tmp_path, build_run):
    """Two Ray env runners: MultiDiscrete actions (with a start) reach the envs and the buffer, and PPO learns."""
    engine = build_run(example("cluster.mode=ray", "env.num_workers=2", "env.num_envs=4",
                               "engine.total_steps=1024", "engine.eval_every=0", "engine.target_eval_return=null"))
    result = engine.run(tmp_path / "run")
    assert result.stop_reason == "total_steps" and result.env_steps >= 1024
    got = [r for r in rows(tmp_path / "run") if "iteration" in r]
    assert all(np.isfinite(r["loss/policy"]) for r in got)
    returns = [r["rollout/episode_return_mean"] for r in got if "rollout/episode_return_mean" in r]
    assert max(returns[-3:]) > returns[0]  # the strict env raises on any action outside its space


@pytest.mark.parametrize(("policy", "env_id", "message"), [
    ("ppo", "TupleAction-v0", r"policy 'ppo' does not support the action space Tuple\(Discrete\(2\)"),
    ("dqn", "BoxTarget-v0", r"policy 'dqn' does not support the action space Box\("),
    ("recurrent_ppo", "MultiDiscreteMatch-v0", r"policy 'recurrent_ppo' does not support the action space Multi"),
])
def test_unsupported_action_space_is_a_config_error_without_traceback(tmp_path, capsys, monkeypatch, policy, env_id,
                                                                      message):
    import re

    from rlightning_cli.main import main

    if policy == "dqn":
        pytest.importorskip("rlightning_dqn")
    if policy == "recurrent_ppo":
        pytest.importorskip("rlightning_recurrent_ppo")
    config = tmp_path / "c.yaml"
    config.write_text(f"""name: c
env: {{type: gymnasium, params: {{id: "rlightning_core.testing.space_envs:{env_id}"}}, num_envs: 2}}
policy: {{type: {policy}}}
engine: {{type: sync, params: {{rollout_steps: 8}}, total_steps: 16}}
""")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["train", str(config), "logging.progress=false"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert "Traceback" not in err and "invalid configuration" in err
    assert re.search(message, err), err
    assert "policy.type:" in err


def test_export_of_a_multidiscrete_policy_acts_like_predict(tmp_path, monkeypatch):
    """``rlightning export`` of PPO on MultiDiscrete([3, 4], start=[0, 1]): the TorchScript module gives the
    start-shifted argmax actions ``predict`` gives, and the spec describes the space per dimension."""
    import torch

    from rlightning_cli.main import main
    from rlightning_core import load_policy
    from rlightning_core.testing.space_envs import MultiDiscreteMatchEnv

    run_dir = tmp_path / "run"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["train", str(ROOT / "examples" / "multidiscrete_ppo.yaml"), "logging.progress=false",
              "engine.total_steps=512", "engine.eval_every=0", "engine.target_eval_return=null",
              "--run-dir", str(run_dir)])
    assert exit_info.value.code == 0
    env = MultiDiscreteMatchEnv()
    env.reset(seed=3)
    obs = np.stack([env._new_target() for _ in range(64)])
    expected, _ = load_policy(run_dir).predict(obs)
    assert expected.shape == (64, 2) and expected[:, 1].min() >= 1  # start offsets applied
    with pytest.raises(SystemExit) as exit_info:
        main(["export", str(run_dir), "--format", "torchscript"])
    assert exit_info.value.code == 0
    scripted = torch.jit.load(str(run_dir / "export" / "policy.pt"))
    with torch.no_grad():
        np.testing.assert_array_equal(scripted(torch.from_numpy(obs)).numpy(), expected)
    spec = json.loads((run_dir / "export" / "policy.json").read_text())["outputs"][0]
    assert (spec["kind"], spec["nvec"], spec["low"], spec["high"]) == ("multi_discrete", [3, 4], [0, 1], [2, 4])
