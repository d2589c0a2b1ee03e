"""The seed's builder API in one process: what its optional arguments do to a run (DESIGN §5)."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

pytestmark = pytest.mark.usefixtures("training_plugins")

#: Offsets the two env configs' preprocess fns add: far outside CartPole's observations (|obs| < 5 here).
SHIFT_A, SHIFT_B = 100.0, -100.0


def shift(offset: float):
    """``obs -> obs + offset`` (a closure, as a user writes one in a script)."""

    def preprocess(obs: np.ndarray) -> np.ndarray:
        return obs + np.float32(offset)

    return preprocess


def two_cartpoles(config):
    """``config`` with two CartPole env configs, ``a`` (2 envs) and ``b`` (3 envs)."""
    env = config.env[0]
    return attrs.evolve(config, env=[attrs.evolve(env, name="a", num_envs=2), attrs.evolve(env, name="b", num_envs=3)])


class RecordingPolicy:
    """Wraps a policy and keeps a copy of every observation batch it is asked to act on."""

    def __init__(self, policy) -> None:
        self.policy = policy
        self.seen: list[np.ndarray] = []

    def act(self, obs, **kwargs):
        self.seen.append(np.array(obs))
        return self.policy.act(obs, **kwargs)

    def __getattr__(self, name):
        return getattr(self.policy, name)


def test_preprocess_fn_per_env_config_reaches_the_policy_the_buffer_and_evaluation(tmp_path, cartpole_config,
                                                                                    at_run_end):
    config = two_cartpoles(cartpole_config("engine.params.rollout_steps=8", "engine.total_steps=40",
                                           "engine.eval_every=0", "engine.eval_episodes=2", "checkpoint.every=0",
                                           "checkpoint.at_end=false"))
    env_group = build_env_group(config.env, [shift(SHIFT_A), shift(SHIFT_B)], seed=config.seed)
    engine = build_engine(config, env_group, build_policy_group(config.policy.type, config.policy, config.cluster),
                          build_data_buffer(config.buffer.type, config.buffer))
    ex = engine.execution
    ex.reset(config.seed)
    ex.collect(8)
    obs = engine.execution.buffer["obs"].numpy()  # [T, 5 envs, 4]: config a's 2 columns, then config b's 3
    assert (obs[:, :2] > SHIFT_A - 10).all() and (obs[:, 2:] < SHIFT_B + 10).all()
    # the policy acted on these (shifted) observations: its recorded values are its values of them
    values = engine.policy_group.rollout.value(obs.reshape(-1, 4)).reshape(8, 5)
    np.testing.assert_allclose(engine.execution.buffer["value"].numpy(), values, rtol=1e-5, atol=1e-5)

    def evaluate(_execution):
        engine.evaluator.policy = recorder = RecordingPolicy(engine.evaluator.policy)
        engine.evaluator.evaluate()
        return recorder.seen

    seen = at_run_end(engine, evaluate)
    engine.run(tmp_path / "run")
    shifted = ["a" if (b > SHIFT_A - 10).all() else "b" if (b < SHIFT_B + 10).all() else "raw" for b in seen["value"]]
    n_a = shifted.count("a")
    assert n_a and shifted == ["a"] * n_a + ["b"] * (len(shifted) - n_a), shifted  # config a's envs, then b's


def test_a_preprocess_fn_that_changes_the_observation_shape_stops_the_run_with_its_name(cartpole_config):
    from rlightning_core.errors import UserError

    config = cartpole_config("engine.params.rollout_steps=8", "env.num_envs=2")

    def drop_first(obs):
        return obs[:, 1:]

    env_group = build_env_group(config.env, drop_first, seed=config.seed)
    engine = build_engine(config, env_group, build_policy_group(config.policy.type, config.policy, config.cluster),
                          build_data_buffer(config.buffer.type, config.buffer))
    with pytest.raises(UserError, match=r"drop_first.*shape \(2, 3\).*\(2, 4\)"):
        engine.execution.reset(config.seed)
    assert engine.execution.runners[0].restarts == 0  # the function's mistake is not an env failure


def test_obs_preprocessor_may_be_a_plain_function(cartpole_config):
    config = cartpole_config("engine.params.rollout_steps=8", "env.num_envs=2")
    buffer = build_data_buffer(config.buffer.type, config.buffer, obs_preprocessor=shift(SHIFT_A),
                               reward_preprocessor=lambda reward: reward * 0.5)
    engine = build_engine(config, build_env_group(config.env, seed=config.seed),
                          build_policy_group(config.policy.type, config.policy, config.cluster), buffer)
    ex = engine.execution
    ex.reset(config.seed)
    ex.collect(8)
    assert (engine.execution.buffer["obs"].numpy() > SHIFT_A - 10).all()
    assert set(np.unique(engine.execution.buffer["rewards"].numpy())) == {0.5}  # CartPole pays 1 per step


def test_the_manifest_records_the_builders_preprocessors_and_resume_checks_them(tmp_path, cartpole_config):
    from rlightning_core.checkpoint.manager import CheckpointManager, resolve_checkpoint
    from rlightning_core.errors import UserError
    from rlightning_core.preprocess.builtins import NormalizeObs
    from rlightning_core.preprocess.params import NormalizeObsParams

    config = cartpole_config("engine.params.rollout_steps=8", "env.num_envs=2", "engine.total_steps=32",
                             "engine.eval_every=0", "checkpoint.every=0")

    def run(resume: bool, **preprocessors):
        engine = build_engine(config, build_env_group(config.env, seed=config.seed),
                              build_policy_group(config.policy.type, config.policy, config.cluster),
                              build_data_buffer(config.buffer.type, config.buffer, **preprocessors))
        return engine.run(tmp_path / "run", resume_from=tmp_path / "run" if resume else None)

    def halve(reward):
        return reward * 0.5

    run(False, obs_preprocessor=NormalizeObs(NormalizeObsParams(clip=5.0)), reward_preprocessor=halve)
    state, manifest = CheckpointManager.load(resolve_checkpoint(tmp_path / "run"))
    assert len(state["preprocessors"]) == 2
    training = manifest["training_config"]
    assert training["preprocessors[0].type"] == "rlightning_core.preprocess.builtins.NormalizeObs"
    assert training["preprocessors[0].params.clip"] == 5.0
    assert training["preprocessors[1].type"] == "function"
    assert training["preprocessors[1].applies_to"] == "reward"
    assert training["preprocessors[1].function"].endswith("halve")
    assert "preprocessors" not in training  # not the config's empty list

    with pytest.raises(UserError, match=r"preprocessors\[0\]\.type"):  # resumed without them: refused, named
        run(True)
    with pytest.raises(UserError, match=r"preprocessors\[0\]\.params\.clip"):
        run(True, obs_preprocessor=NormalizeObs(NormalizeObsParams(clip=3.0)), reward_preprocessor=halve)
    result = run(True, obs_preprocessor=NormalizeObs(NormalizeObsParams(clip=5.0)), reward_preprocessor=halve)
    assert result.iterations == 2  # the same preprocessors: resumed (the run had finished: nothing more to train)

    from rlightning_core.evaluate import evaluate_checkpoint

    with pytest.raises(UserError, match=r"state of 2 preprocessor\(s\) \(.*NormalizeObs, .*halve\) but 0 are in"):
        evaluate_checkpoint(tmp_path / "run", episodes=2)
    norm = NormalizeObs(NormalizeObsParams(clip=5.0))
    assert np.isfinite(evaluate_checkpoint(tmp_path / "run", episodes=2, obs_preprocessor=norm,
                                           reward_preprocessor=halve)["mean"])
    np.testing.assert_array_equal(norm.state_dict()["count"], state["preprocessors"][0]["count"])  # stats loaded


def test_a_checkpoint_trained_with_preprocess_fns_needs_them_to_resume_and_to_evaluate(tmp_path, cartpole_config):
    import subprocess
    import sys
    from pathlib import Path

    from rlightning_core.checkpoint.manager import CheckpointManager, resolve_checkpoint
    from rlightning_core.errors import UserError
    from rlightning_core.evaluate import evaluate_checkpoint

    config = cartpole_config("engine.params.rollout_steps=8", "env.num_envs=2", "engine.total_steps=16",
                             "engine.eval_every=0", "checkpoint.every=0")
    fn = shift(SHIFT_A)

    def run(preprocess_fn, resume: bool):
        engine = build_engine(config, build_env_group(config.env, preprocess_fn, seed=config.seed),
                              build_policy_group(config.policy.type, config.policy, config.cluster),
                              build_data_buffer(config.buffer.type, config.buffer))
        return engine.run(tmp_path / "run", resume_from=tmp_path / "run" if resume else None)

    run(fn, False)
    _, manifest = CheckpointManager.load(resolve_checkpoint(tmp_path / "run"))
    assert manifest["training_config"]["env[0].preprocess_fn"].endswith("shift.<locals>.preprocess")
    with pytest.raises(UserError, match=r'env\[0\]\.preprocess_fn: ".*preprocess" in the checkpoint, not set now'):
        run(None, True)
    assert run(fn, True).iterations == 1

    # `rlightning eval` cannot know the function: a clear refusal, not an evaluation on other inputs
    exe = Path(sys.executable).with_name("rlightning")
    proc = subprocess.run([str(exe), "eval", str(tmp_path / "run"), "--episodes", "2"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "build_env_group(preprocess_fn=...)" in proc.stderr and "Traceback" not in proc.stderr
    result = evaluate_checkpoint(tmp_path / "run", episodes=2, preprocess_fn=fn)
    assert np.isfinite(result["mean"])
    with pytest.raises(UserError, match=r"holds the state of 0 preprocessor\(s\) \(\) but 1 were passed"):
        evaluate_checkpoint(tmp_path / "run", episodes=2, preprocess_fn=fn, obs_preprocessor=shift(1.0))
