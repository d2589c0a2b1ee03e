"""cluster.sharded_buffer on a real local Ray cluster: shards in the env runners, global reads by the learner."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("training_plugins")]

ROOT = Path(__file__).resolve().parents[2]


def _dqn_available() -> bool:
    from rlightning_core.plugins import get_plugins

    return "dqn" in get_plugins().registry.names("policy")


def test_on_policy_shards_are_gathered_and_learn_exactly_like_sent_chunks(ray_cluster, cartpole_config,
                                                                           build_run):
    import torch

    from rlightning_core.buffer.sharded import ShardReceipt
    from rlightning_core.builders import build_data_buffer
    from rlightning_core.plugins import get_plugins
    from rlightning_core.policy.base import PolicyRole

    ray = ray_cluster
    config = cartpole_config("cluster.mode=ray", "env.num_workers=2", "env.num_envs=4", "checkpoint.every=0",
                             "cluster.sharded_buffer=true")
    ex = build_run(config).execution
    ex.reset(config.seed)
    ex.collect(32)
    receipts = ray.get(ex._pending_chunks)
    assert all(isinstance(r, ShardReceipt) for r in receipts)  # only receipts left the runners
    assert ray.get([a.shard_stats.remote() for a in ex.env_group.actors]) == [(128, 128)] * 2
    kept = ray.get([a.__ray_call__.remote(lambda self: list(self.shard_chunks)) for a in ex.env_group.actors])
    before = ray.get(ex.learner.state_dict.remote())["learner"]
    ex.learn(0.0)
    assert ray.get([a.shard_stats.remote() for a in ex.env_group.actors]) == [(0, 128)] * 2  # gathered
    learned = ray.get(ex.learner.get_weights.remote())
    extras = ray.get(ex.learner.extras_spec.remote())
    spec = ex._shard_spec(0, 32, extras)
    ex.close()
    # the same learner, fed the same chunks directly in this process, makes the same update
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        policy = get_plugins().registry.resolve("policy", "ppo").build(
            ex.policy_cfg.params, observation_space=ex.observation_space, action_space=ex.action_space,
            role=PolicyRole.TRAIN, device="cpu", seed=0)
        policy.load_state_dict(before)
        buffer = build_data_buffer(config.buffer.type, config.buffer).bind(spec)
        for part in kept:
            for chunk in part:
                buffer.add(chunk)
        policy.learn(buffer, progress=0.0)
    finally:
        torch.set_num_threads(threads)
    expected = policy.get_weights()
    assert any(not np.array_equal(expected[k], before["modules"]["net"][k.split(".", 1)[1]].numpy())
               for k in expected)
    for key in expected:
        np.testing.assert_allclose(learned[key], expected[key], rtol=1e-6, atol=1e-7)


@pytest.mark.skipif(not _dqn_available(), reason="needs the rlightning-dqn plugin")
def test_off_policy_samples_across_shards_in_proportion_to_their_sizes(ray_cluster, tmp_path, build_run):
    from rlightning_core import load_config

    ray = ray_cluster
    config = load_config(ROOT / "examples" / "cartpole_dqn.yaml", [
        "logging.progress=false", "cluster.mode=ray", "env.num_workers=2", "env.num_envs=2",
        "cluster.sharded_buffer=true", "policy.params.hidden_sizes=[32,32]", "policy.params.learning_starts=128",
        "engine.params.rollout_steps=32", "engine.total_steps=1536", "engine.eval_every=0",
        "engine.eval_episodes=2", "checkpoint.every=0"])
    engine = build_run(config)
    ex = engine.execution
    ex.reset(config.seed)
    a0, a1 = ex.env_group.actors
    # shard 0 gets three chunks, shard 1 one: 192 vs 64 transitions
    ray.get([a0.collect.options(num_returns=2).remote(32)[1] for _ in range(3)]
            + [a1.collect.options(num_returns=2).remote(32)[1]])
    sizes = ray.get([a.shard_stats.remote() for a in (a0, a1)])
    assert sizes[0][0] > 2.5 * sizes[1][0] > 0  # (n-step look-ahead holds back a few per column)

    def draw(learner):
        import torch

        buf = learner.buffer
        gen = torch.Generator().manual_seed(0)
        buf.refresh()
        counts = np.zeros(2)
        for _ in range(40):
            batch = buf.sample(64, gen)
            assert batch["obs"].shape == (64, 4) and batch["next_obs"].shape == (64, 4)
            for i, c in buf._last_split:
                counts[i] += c
        return len(buf), buf.total_added, counts

    length, added, counts = ray.get(ex.learner.__ray_call__.remote(draw))
    assert length == sizes[0][0] + sizes[1][0] and added == 256
    share = counts[0] / counts.sum()
    expected = sizes[0][0] / length
    assert abs(share - expected) < 0.04, (share, expected)
    # and the async engine trains from the shards end to end
    result = engine.run(tmp_path / "run")
    assert result.stop_reason == "total_steps" and engine.updates > 0
