"""Dict observations and action masking on Ray: env actors flatten them, runners' policies mask, runs go on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("training_plugins")]
ROOT = Path(__file__).resolve().parents[2]


def test_masked_dict_env_runs_on_ray_without_illegal_actions(ray_cluster, tmp_path):
    from rlightning_core import load_config
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group
    from rlightning_core.spaces import FlatDict

    cfg = load_config(ROOT / "examples" / "masked_ppo.yaml", [
        "logging.progress=false", "cluster.mode=ray", "env.num_workers=2", "env.num_envs=2",
        "engine.params.rollout_steps=16", "engine.total_steps=512", "engine.eval_every=0"])
    env_group = build_env_group(cfg.env, seed=cfg.seed)
    engine = build_engine(cfg, env_group, build_policy_group(cfg.policy.type, cfg.policy, cfg.cluster),
                          build_data_buffer(cfg.buffer.type, cfg.buffer))
    try:
        assert isinstance(engine.execution.observation_space, FlatDict)  # as the env actors reported it
        result = engine.run(tmp_path / "run")
    finally:
        env_group.close()
    assert result.env_steps == 512
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    illegal = [v for r in rows for k, v in r.items() if k.endswith("/illegal_action")]
    assert illegal and max(illegal) == 0.0
