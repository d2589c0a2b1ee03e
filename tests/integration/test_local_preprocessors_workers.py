"""Stateful preprocessors with several env workers in one process: each worker keeps its own per-env values
(``scale_reward``'s running returns), statistics are shared and count every worker's data exactly once, and a
resume restores both."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
OVERRIDES = ["preprocessors=[{type: scale_reward}, {type: normalize_obs}]", "env.num_workers=2", "env.num_envs=4",
             "engine.params.rollout_steps=16", "engine.eval_every=0", "checkpoint.every=1",
             "logging.progress=false", "engine.target_eval_return=null"]


def _engine(steps: int, *extra: str):
    from rlightning_core import load_config
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group
    from rlightning_core.plugins import get_plugins

    if not {"gymnasium"} <= set(get_plugins().registry.names("env")):
        pytest.skip("needs the gymnasium plugin")
    config = load_config(ROOT / "examples" / "cartpole_ppo.yaml", [*OVERRIDES, f"engine.total_steps={steps}", *extra])
    return build_engine(config, build_env_group(config.env, seed=config.seed),
                        build_policy_group(config.policy.type, config.policy, config.cluster),
                        build_data_buffer(config.buffer.type, config.buffer))


def test_two_workers_train_with_per_env_reward_scaling_and_shared_statistics(tmp_path: Path) -> None:
    engine = _engine(256)
    result = engine.run(tmp_path / "run")
    assert result.env_steps == 256
    scale, norm = engine.execution.preprocessors
    # every env step of both workers entered the shared statistics once (the initial count is epsilon-sized)
    assert scale.rms.count == pytest.approx(256, abs=1e-3)
    assert norm.rms.count == pytest.approx(256 + 8, abs=1e-3)  # + the 8 observations of the first reset
    own = [pairs[0][1] for pairs in engine.execution.runner_copies]
    assert [o.returns.shape for o in own] == [(4,), (4,)]
    assert not np.array_equal(own[0].returns, own[1].returns)  # each worker's envs have their own episodes


def test_resume_restores_each_workers_running_returns(tmp_path: Path) -> None:
    first = _engine(128)
    first.run(tmp_path / "run")
    saved = [pairs[0][1].returns.copy() for pairs in first.execution.runner_copies]
    assert any(s.any() for s in saved)
    second = _engine(128)  # the same budget: the resumed run restores and stops at once
    assert second.run(tmp_path / "resumed", resume_from=tmp_path / "run").env_steps == 128
    restored = [pairs[0][1].returns for pairs in second.execution.runner_copies]
    for a, b in zip(saved, restored, strict=True):
        np.testing.assert_array_equal(a, b)


def test_load_checkpoint_before_run_restores_the_state(tmp_path: Path) -> None:
    """``engine.load_checkpoint`` on an engine that has not run checks the manifest against its own config."""
    first = _engine(128)
    first.run(tmp_path / "run")
    second = _engine(128)
    second.load_checkpoint(tmp_path / "run")
    assert second.env_steps == 128
    for first_pairs, second_pairs in zip(first.execution.runner_copies, second.execution.runner_copies, strict=True):
        np.testing.assert_array_equal(first_pairs[0][1].returns, second_pairs[0][1].returns)
    from rlightning_core.errors import UserError

    other = _engine(128, "policy.params.lr=0.001")

    with pytest.raises(UserError, match="cannot resume"):
        other.load_checkpoint(tmp_path / "run")

