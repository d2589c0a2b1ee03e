"""APPO inherits PPO's Dict encoders and action masking (its learn reads PPO's masked ``_evaluate``)."""

from __future__ import annotations

import json
from pathlib import Path

import rlightning_core.testing.dict_envs  # noqa: F401  (registers the ids)

ROOT = Path(__file__).resolve().parents[3]


def test_appo_on_the_masked_env_takes_no_illegal_action_and_learns(tmp_path):
    from rlightning_core import load_config
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

    cfg = load_config(ROOT / "examples" / "masked_ppo.yaml", [
        "logging.progress=false", "policy.type=appo", "policy.params={}", "engine.total_steps=2048"])
    engine = build_engine(cfg, build_env_group(cfg.env, seed=cfg.seed),
                          build_policy_group(cfg.policy.type, cfg.policy, cfg.cluster),
                          build_data_buffer(cfg.buffer.type, cfg.buffer))
    result = engine.run(tmp_path / "run")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    illegal = [v for r in rows for k, v in r.items() if k.endswith("/illegal_action")]
    assert illegal and max(illegal) == 0.0
    assert result.last_eval_return >= 9.5  # of 10 (the cued action every step)
