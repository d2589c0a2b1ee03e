"""The seed's builder API on a real local Ray cluster: per-config preprocess fns, builder preprocessors, colocation."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("training_plugins")]

SHIFT_A, SHIFT_B = 100.0, -100.0


def shift(offset: float):
    """``obs -> obs + offset``: a closure, which Ray sends to the env actors by value."""

    def preprocess(obs: np.ndarray) -> np.ndarray:
        return obs + np.float32(offset)

    return preprocess


def test_preprocess_fns_and_builder_preprocessors_run_in_the_env_actors(ray_cluster, tmp_path, cartpole_config,
                                                                        at_run_end):
    from rlightning_core.preprocess.builtins import ScaleReward

    config = cartpole_config("cluster.mode=ray", "cluster.num_learners=0", "engine.params.rollout_steps=8",
                             "engine.total_steps=40", "engine.eval_every=0", "engine.eval_episodes=2",
                             "checkpoint.every=0", "checkpoint.at_end=false")
    env = config.env[0]
    config = attrs.evolve(config, env=[attrs.evolve(env, name=name, num_envs=2) for name in ("a", "b")])
    env_group = build_env_group(config.env, [shift(SHIFT_A), shift(SHIFT_B)], seed=config.seed)
    buffer = build_data_buffer(config.buffer.type, config.buffer, obs_preprocessor=lambda obs: obs * 2,
                               reward_preprocessor=ScaleReward())
    engine = build_engine(config, env_group, build_policy_group(config.policy.type, config.policy, config.cluster),
                          buffer)
    ex = engine.execution
    ray = ex.ray
    try:
        learner = ex.learner.target.policy  # the learner runs in the driver; its weights equal the runners' copies
        for index, (low, high) in enumerate([(2 * SHIFT_A - 20, 2 * SHIFT_A + 20),
                                             (2 * SHIFT_B - 20, 2 * SHIFT_B + 20)]):
            chunk_ref, stats_ref = ex.start_collect(index, 8)
            chunk = ray.get(chunk_ref)
            assert ex.finish_collect(index, stats_ref) is not None
            obs = np.array(chunk.data["obs"])  # what the buffer stores: the config's fn, then the builder's
            assert ((obs > low) & (obs < high)).all(), (index, obs.min(), obs.max())
            np.testing.assert_allclose(chunk.data["value"], learner.value(obs.reshape(-1, 4)).reshape(8, 2),
                                       rtol=1e-4, atol=1e-4)  # the runner's policy acted on these observations
        assert ex.preprocessors_given and ex.preprocessors[1].state_dict()["count"] > 0  # runners' stats merged

        def evaluate(_execution):
            seen = []
            policy = engine.evaluator.policy
            engine.evaluator.policy = type("Recording", (), {
                "act": lambda self, obs, **kw: (seen.append(np.array(obs)), policy.act(obs, **kw))[1]})()
            engine.evaluator.evaluate()
            return seen

        seen = at_run_end(engine, evaluate)
        engine.run(tmp_path / "run")
    finally:
        ex.close()  # again after the run: a no-op
        env_group.close()  # the local envs the script built (the run used env actors)
    kinds = ["a" if (b > SHIFT_A).all() else "b" if (b < SHIFT_B).all() else "raw" for b in seen["value"]]
    n_a = kinds.count("a")
    assert n_a and kinds == ["a"] * n_a + ["b"] * (len(kinds) - n_a), kinds  # eval envs: the same fns, in order


def test_is_colocated_puts_the_learner_and_the_env_runners_in_one_bundle(ray_cluster, cartpole_config,
                                                                        placement_groups_of):
    from ray.util import placement_group_table

    config = cartpole_config("cluster.mode=ray", "env.num_workers=2", "env.num_envs=2", "checkpoint.every=0")
    assert config.cluster.placement == "default"
    policy_group = build_policy_group(config.policy.type, config.policy, config.cluster, is_colocated=True)
    engine = build_engine(config, build_env_group(config.env, seed=config.seed), policy_group,
                          build_data_buffer(config.buffer.type, config.buffer))
    ex = engine.execution
    assert engine.config.cluster.placement == "colocate"  # the run's saved config says what it ran with
    plan = ex.env_group.plan
    try:
        assert plan.pg is not None and [dict(b) for b in placement_group_table(plan.pg)["bundles"].values()] == [
            {"CPU": 3.0}]
        members = [ex.learner, *ex.env_group.actors]
        assert placement_groups_of(ray_cluster, members) == [plan.pg.id.hex()] * 3
    finally:
        ex.close()
        engine.env_group.close()
