"""Ray mode: the driver's preprocessor statistics count every env runner's data exactly once, however many
chunks the runners have reported (each report carries only what is new since the last one)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("training_plugins")]


def test_merged_statistics_count_each_observation_once(ray_cluster, tmp_path, cartpole_config, build_run) -> None:
    config = cartpole_config("cluster.mode=ray", "cluster.num_cpus=4", "env.num_workers=2", "env.num_envs=4",
                             "engine.params.rollout_steps=16", "engine.total_steps=512", "engine.eval_every=0",
                             "checkpoint.every=0", "engine.target_eval_return=null",
                             "preprocessors=[{type: normalize_obs}, {type: scale_reward}]")
    engine = build_run(config)
    try:
        result = engine.run(tmp_path / "run")
        norm, scale = engine.execution.preprocessors
        assert result.env_steps == 512 and result.iterations == 4
        assert scale.rms.count == pytest.approx(512, abs=1e-3)  # one return per env step
        assert norm.rms.count == pytest.approx(512 + 8, abs=1e-3)  # + the first reset's 8 observations
    finally:
        engine.execution.close()
