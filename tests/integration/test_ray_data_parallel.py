"""Data-parallel learners on a real local Ray cluster: a real gloo group of two learner actors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("training_plugins")]


def dp_config(cartpole_config, *overrides):
    return cartpole_config("cluster.mode=ray", "env.num_workers=2", "env.num_envs=4", "checkpoint.every=0",
                           "cluster.num_learners=2", *overrides)


def _weights(ray, learners):
    return ray.get([ln.get_weights.remote() for ln in learners])


def test_two_learners_average_gradients_and_stay_in_step(ray_cluster, cartpole_config, build_run):
    import torch

    from rlightning_core.plugins import get_plugins
    from rlightning_core.policy.base import PolicyRole

    config = dp_config(cartpole_config, "engine.total_steps=512", "policy.params.minibatch_size=64")
    engine = build_run(config)
    ex = engine.execution
    ray = ex.ray
    assert len(ex.learners) == 2
    w0, w1 = _weights(ray, ex.learners)
    for key in w0:  # rank 0's initial parameters were broadcast (ranks are seeded differently)
        np.testing.assert_array_equal(w0[key], w1[key])

    # gradients: each rank sees half of a batch; the averaged gradient is the gradient of the whole batch
    rng = np.random.default_rng(0)
    batch = {"obs": torch.as_tensor(rng.normal(size=(32, 4)), dtype=torch.float32),
             "actions": torch.as_tensor(rng.integers(0, 2, size=32)),
             "adv": torch.as_tensor(rng.normal(size=32), dtype=torch.float32),
             "ret": torch.as_tensor(rng.normal(size=32), dtype=torch.float32)}

    def loss_fn(policy, b):  # a local function: Ray ships it by value
        logp, _, value = policy._evaluate(b["obs"], b["actions"])
        return -(logp * b["adv"]).mean() + ((value - b["ret"]) ** 2).mean()

    shards = [{k: v[r * 16:(r + 1) * 16] for k, v in batch.items()} for r in range(2)]
    grads = ray.get([ln.gradients.remote(loss_fn, s) for ln, s in zip(ex.learners, shards, strict=True)])
    spec = get_plugins().registry.resolve("policy", "ppo")
    local = spec.build(ex.policy_cfg.params, observation_space=ex.observation_space,
                       action_space=ex.action_space, role=PolicyRole.LEARNER, device="cpu", seed=123)
    local.set_weights(w0)
    local.optimizer.zero_grad()
    loss_fn(local, batch).backward()
    expected = {f"net.{k}": p.grad.numpy() for k, p in local.net.named_parameters() if p.grad is not None}
    assert grads[0].keys() == expected.keys() and len(expected) >= 4
    for key, value in expected.items():
        np.testing.assert_allclose(grads[0][key], value, rtol=1e-5, atol=1e-7)
        np.testing.assert_array_equal(grads[0][key], grads[1][key])  # same bits on both ranks
    single = {}  # and it is not what one rank alone would have computed
    local.optimizer.zero_grad()
    loss_fn(local, shards[0]).backward()
    single = {f"net.{k}": p.grad.numpy() for k, p in local.net.named_parameters() if p.grad is not None}
    assert any(not np.allclose(single[k], expected[k]) for k in expected)

    # a real learning phase: both ranks learn from their shard and end with identical parameters
    for _ in range(2):
        ex.collect(32)
        metrics = ex.learn(0.0)
        ex.sync()
    assert "loss/policy" in metrics and np.isfinite(metrics["loss/policy"])
    a, b = _weights(ray, ex.learners)
    assert any(not np.array_equal(a[k], w0[k]) for k in a)  # they did learn
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    # and rank 0's weights are what the rollout copies act with
    runner = ray.get(ex.env_group.actors[1].get_weights.remote())
    for key in a:
        np.testing.assert_array_equal(runner[key], a[key])
    ex.close()


def test_uneven_split_is_a_config_error(cartpole_config):
    from rlightning_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"env\[0\]\.num_envs: 3 envs per worker cannot be split"):
        dp_config(cartpole_config, "env.num_envs=3")  # when the config is loaded: before Ray starts


def test_two_learner_ppo_trains_cartpole(ray_cluster, tmp_path, cartpole_config, build_run):
    config = dp_config(cartpole_config, "engine.total_steps=16384", "engine.eval_every=0",
                       "engine.eval_episodes=5", "policy.params.minibatch_size=64")
    result = build_run(config).run(tmp_path / "run")
    assert result.env_steps >= 16384
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    returns = [r["rollout/episode_return_mean"] for r in rows if "rollout/episode_return_mean" in r]
    assert returns[-1] > 2 * returns[0] and returns[-1] > 60, returns
    assert result.last_eval_return is not None and result.last_eval_return > 100, result


def test_two_sac_learners_stay_in_step_under_the_async_engine(ray_cluster, tmp_path, build_run, at_run_end):
    """The off-policy path: equal column slices keep the ranks' update schedules (and collectives) in step."""
    from rlightning_core import load_config
    from rlightning_core.plugins import get_plugins

    if "sac" not in get_plugins().registry.names("policy"):
        pytest.skip("needs the rlightning-sac plugin")
    root = Path(__file__).resolve().parents[2]
    config = load_config(root / "examples" / "pendulum_sac_ray.yaml", [
        "logging.progress=false", "cluster.num_learners=2", "env.num_envs=2", "policy.params.hidden_sizes=[32,32]",
        "policy.params.batch_size=32", "engine.total_steps=512", "engine.eval_every=0", "engine.eval_episodes=1",
        "engine.params.sync_every=8"])
    engine = build_run(config)
    seen = at_run_end(engine, lambda ex: ray_cluster.get([ln.get_weights.remote() for ln in ex.learners]))
    result = engine.run(tmp_path / "run")
    assert result.stop_reason == "total_steps" and engine.updates > 0
    a, b = seen["value"]
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
