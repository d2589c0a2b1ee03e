"""The predict API: ``load_policy(run_dir).predict(obs)`` acts like the trained run's own rollout policy."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import numpy as np
import pytest

from rlightning_core.testing.observations import rollout_observations

pytestmark = pytest.mark.usefixtures("training_plugins")

SMALL = ("engine.total_steps=1024", "engine.eval_every=0", "checkpoint.every=0", "env[0].num_envs=4",
         "preprocessors=[{type: normalize_obs}]")


ROOT = Path(__file__).resolve().parents[2]


def _train(run_dir: Path, *overrides: str):
    """A few PPO iterations with observation normalization, assembled with the builders; returns the engine."""
    from rlightning_core import load_config
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

    config = load_config(ROOT / "examples" / "cartpole_ppo.yaml", ["logging.progress=false", *SMALL, *overrides])
    env_group = build_env_group(config.env, seed=config.seed)
    policy_group = build_policy_group(config.policy.type, config.policy, config.cluster)
    buffer = build_data_buffer(config.buffer.type, config.buffer)
    engine = build_engine(config, env_group, policy_group, buffer)
    engine.run(run_dir)
    return engine


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """CartPole: ``(engine, run_dir)``."""
    run_dir = tmp_path_factory.mktemp("predict") / "run"
    return _train(run_dir), run_dir


def _observations(n: int, seed: int = 3, env_id: str = "CartPole-v1") -> np.ndarray:
    return rollout_observations(env_id, n, seed)


def test_predict_equals_the_training_rollout_action(trained):
    from rlightning_core import load_policy

    engine, run_dir = trained
    obs = _observations(200)
    # What the run's own rollout policy does at the end of training, through its live preprocessors.
    processed = obs
    for pre in engine.preprocessors:
        processed = pre.obs(processed, update=False)
    expected = engine.policy_group.rollout.act(processed, deterministic=True).actions
    loaded = load_policy(run_dir)
    assert loaded.preprocessors and loaded.preprocessors[0].rms.count > 1  # the statistics were restored
    actions, state = loaded.predict(obs)
    assert state is None
    assert actions.shape == (200,) and np.array_equal(actions, expected)
    assert len(set(actions.tolist())) == 2  # both actions occur: the comparison is not trivially constant
    again, _ = loaded.predict(obs)  # frozen statistics: predicting changes nothing
    assert np.array_equal(again, actions)


def test_predict_equals_the_training_env_action_for_continuous_actions(tmp_path):
    """Pendulum: the clipped mean the run's rollout policy sends to its envs."""
    from rlightning_core import load_policy

    engine = _train(tmp_path / "run", "env[0].params.id=Pendulum-v1")
    obs = _observations(200, env_id="Pendulum-v1")
    processed = obs
    for pre in engine.preprocessors:
        processed = pre.obs(processed, update=False)
    expected = engine.policy_group.rollout.act(processed, deterministic=True).env_actions
    actions, _ = load_policy(tmp_path / "run").predict(obs)
    assert actions.shape == (200, 1) and np.array_equal(actions, expected)
    assert float(np.ptp(expected)) > 1e-3
    single, _ = load_policy(tmp_path / "run").predict(obs[0])
    # a batch of one takes another matrix-product path: equal to float32 rounding, not bit for bit
    assert single.shape == (1,) and np.allclose(single, expected[0], rtol=0, atol=1e-6)


def test_single_observations_give_the_batch_actions(trained):
    from rlightning_core import load_policy

    _, run_dir = trained
    loaded = load_policy(run_dir)
    obs = _observations(50, seed=11)
    batch, _ = loaded.predict(obs)
    single = [loaded.predict(o)[0] for o in obs]
    assert all(np.ndim(a) == 0 for a in single)
    assert np.array_equal(np.asarray(single), batch)
    assert np.array_equal(loaded.predict(obs.astype(np.float64))[0], batch)  # cast to the space's dtype


def test_a_wrong_observation_shape_is_a_user_error(trained):
    from rlightning_core import UserError, load_policy

    with pytest.raises(UserError, match=r"shape \(3,\); the policy takes \(4,\)"):
        load_policy(trained[1]).predict(np.zeros(3))


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_a_missing_or_empty_run_dir_is_a_user_error_naming_it(tmp_path, kind):
    from rlightning_core import UserError, load_policy

    path = tmp_path / "run"
    if kind == "empty":
        path.mkdir()
    with pytest.raises(UserError, match=r"no checkpoint at|no readable checkpoint in") as info:
        load_policy(path)
    assert str(path) in str(info.value)


class _Evil:
    """Unpickling this runs ``touch MARKER``: a checkpoint holding it must be refused, unexecuted."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


def test_a_planted_pickle_is_refused_and_never_run(tmp_path):
    import torch

    from rlightning_core import UserError, load_policy

    marker = tmp_path / "pwned"
    evil = tmp_path / "ckpt-00000001.pt"
    torch.save({"format": "rlightning-checkpoint", "format_version": 1,
                "meta": {"step": 1, "iteration": 1, "eval_return": None},
                "manifest": {}, "state": {"x": _Evil(marker)}}, evil)
    with pytest.raises(UserError, match="refusing to unpickle") as info:
        load_policy(evil)
    assert str(evil) in str(info.value)
    assert not marker.exists()
