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
            role=PolicyRole.LEARNER, device="cpu", seed=0)
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


def test_data_parallel_learners_gather_their_slices_and_learn_like_sent_chunks(ray_cluster, cartpole_config,
                                                                                build_run):
    """Two learners over the shards: each gathers its half of every chunk's envs; the update is the one the
    same two learners make from chunks sent to them, and both ranks stay identical."""
    from rlightning_core.buffer.sharded import ShardReceipt

    ray = ray_cluster
    learned, initial = {}, {}
    for sharded in (False, True):
        config = cartpole_config("cluster.mode=ray", "env.num_workers=2", "env.num_envs=4", "checkpoint.every=0",
                                 "cluster.num_learners=2", f"cluster.sharded_buffer={str(sharded).lower()}")
        ex = build_run(config).execution
        try:
            ex.reset(config.seed)
            initial[sharded] = ray.get(ex.learner.get_weights.remote())
            ex.collect(32)
            if sharded:
                assert all(isinstance(r, ShardReceipt) for r in ray.get(ex._pending_chunks))
                assert ray.get([a.shard_stats.remote() for a in ex.env_group.actors]) == [(128, 128)] * 2
            ex.learn(0.0)
            if sharded:  # both ranks took their slices, so the shards let the chunks go
                assert ray.get([a.shard_stats.remote() for a in ex.env_group.actors]) == [(0, 128)] * 2
                sizes = ray.get([ln.__ray_call__.remote(lambda self: self.buffer.spec.num_envs)
                                 for ln in ex.learners])
                assert sizes == [4, 4]  # each rank's buffer holds half of the 8 envs' columns
            learned[sharded] = ray.get([ln.get_weights.remote() for ln in ex.learners])
        finally:
            ex.close()
    for key in initial[True]:
        np.testing.assert_array_equal(initial[True][key], initial[False][key])
    rank0, rank1 = learned[True]
    assert any(not np.array_equal(rank0[k], initial[True][k]) for k in rank0)  # it learned
    for key in rank0:
        np.testing.assert_array_equal(rank0[key], rank1[key])
        np.testing.assert_allclose(rank0[key], learned[False][0][key], rtol=1e-6, atol=1e-7)


@pytest.mark.skipif(not _dqn_available(), reason="needs the rlightning-dqn plugin")
def test_data_parallel_learners_sample_the_shards_in_step_under_the_async_engine(ray_cluster, tmp_path, build_run,
                                                                                 at_run_end):
    """Off-policy: each rank samples across all shards with its own generator, and counts what was written from
    the receipts, so both make the same number of updates while the shards keep growing (no collective left
    unpaired), and end with identical parameters."""
    from rlightning_core import load_config

    config = load_config(ROOT / "examples" / "cartpole_dqn.yaml", [
        "logging.progress=false", "cluster.mode=ray", "env.num_workers=2", "env.num_envs=2",
        "cluster.num_learners=2", "cluster.sharded_buffer=true", "policy.params.hidden_sizes=[32,32]",
        "policy.params.learning_starts=128", "engine.params.rollout_steps=32", "engine.total_steps=1536",
        "engine.eval_every=0", "engine.eval_episodes=1", "checkpoint.every=0"])
    engine = build_run(config)

    def read(ex):
        counts = ray_cluster.get([ln.__ray_call__.remote(
            lambda self: (type(self.buffer).__name__, self.buffer.received, self.policy.schedule.updates))
            for ln in ex.learners])
        return counts, ray_cluster.get([ln.get_weights.remote() for ln in ex.learners])

    seen = at_run_end(engine, read)
    result = engine.run(tmp_path / "run")
    assert result.stop_reason == "total_steps" and engine.updates > 0
    counts, (a, b) = seen["value"]
    (kind0, received0, updates0), (kind1, received1, updates1) = counts
    assert kind0 == kind1 == "ShardedReplay"
    assert received0 == received1 > 128 and updates0 == updates1 > 0
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


@pytest.mark.skipif(not _dqn_available(), reason="needs the rlightning-dqn plugin")
def test_a_resumed_sharded_run_keeps_making_updates(ray_cluster, tmp_path, build_run):
    """Shard contents are not checkpointed; the policy's update schedule counts on from what was written
    before, instead of waiting until the empty shards have caught up with the old count."""
    from rlightning_core import load_config

    def config(total):
        return load_config(ROOT / "examples" / "cartpole_dqn.yaml", [
            "logging.progress=false", "cluster.mode=ray", "env.num_workers=2", "env.num_envs=2",
            "cluster.sharded_buffer=true", "policy.params.hidden_sizes=[32,32]", "policy.params.learning_starts=128",
            "engine.params.rollout_steps=32", f"engine.total_steps={total}", "engine.eval_every=0",
            "engine.eval_episodes=1", "checkpoint.every=0", "checkpoint.at_end=true"])

    first = build_run(config(768))
    first.run(tmp_path / "a")
    first.env_group.close()
    before = first.updates
    again = build_run(config(1536))
    result = again.run(tmp_path / "b", resume_from=tmp_path / "a")
    assert result.env_steps >= 1536 and before > 0
    # the same number of new transitions warrants about as many updates again (the warm-up is not repeated)
    assert again.updates - before > 0.9 * before
