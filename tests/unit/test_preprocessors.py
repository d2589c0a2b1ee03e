"""Builtin preprocessors and RunningMeanStd: normalization, update flag, merges, state, reward scaling."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from gymnasium import spaces

from rlightning_core.preprocess.builtins import ClipObs, ClipReward, NormalizeObs, ScaleReward
from rlightning_core.preprocess.params import (
    ClipObsParams,
    ClipRewardParams,
    NormalizeObsParams,
    ScaleRewardParams,
)
from rlightning_core.preprocess.running_stats import RunningMeanStd, batch_moments

BOX3 = spaces.Box(-np.inf, np.inf, (3,), np.float32)


def data(seed=0, n=2000):
    rng = np.random.default_rng(seed)
    return rng.normal(loc=[5.0, -2.0, 0.0], scale=[3.0, 0.5, 10.0], size=(n, 3)).astype(np.float32)


def assert_stats_equal(stats: RunningMeanStd, reference: np.ndarray):
    reference = reference.astype(np.float64)
    np.testing.assert_allclose(stats.mean, reference.mean(axis=0), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(stats.var, reference.var(axis=0), rtol=1e-10, atol=1e-10)
    assert stats.count == len(reference)


def test_running_mean_std_matches_numpy_and_merges():
    x = data().astype(np.float64)
    rms = RunningMeanStd((3,))
    for batch in np.array_split(x, 17):
        rms.update(batch)
    assert_stats_equal(rms, x)
    a, b = RunningMeanStd((3,)), RunningMeanStd((3,))
    a.update(x[:300])
    b.update(x[300:])
    a.merge(b.mean, b.var, b.count)
    assert_stats_equal(a, x)
    empty = RunningMeanStd((3,))
    np.testing.assert_array_equal(empty.var, 1.0)
    empty.merge(a.mean, a.var, a.count)
    assert_stats_equal(empty, x)
    a.merge(np.zeros(3), np.ones(3), 0)  # merging nothing changes nothing
    assert_stats_equal(a, x)


def test_one_sample_batches_fold_in_exactly_as_numpy_s_moments_would():
    # one env steps one sample at a time: its moments skip numpy's mean/var, with the same bits
    x = data(n=300).astype(np.float64)
    for row in x[:5]:
        mean, var, n = batch_moments(row[None], (3,))
        assert n == 1
        assert mean.tobytes() == row[None].mean(axis=0).tobytes()
        assert var.tobytes() == row[None].var(axis=0).tobytes()
    fast, reference = RunningMeanStd((3,)), RunningMeanStd((3,))
    for row in x:
        fast.update(row[None])
        reference.merge(row[None].mean(axis=0), row[None].var(axis=0), 1)
    assert fast.mean.tobytes() == reference.mean.tobytes() and fast.var.tobytes() == reference.var.tobytes()
    assert_stats_equal(fast, x)
    assert batch_moments(np.zeros((0, 3)), (3,)) is None
    # merge_one (the synced statistics' per-step path) gives merge's bits, scalars (returns) included
    one, scalar, scalar_ref = RunningMeanStd((3,)), RunningMeanStd(()), RunningMeanStd(())
    for row in x:
        one.merge_one(row)
        scalar.merge_one(np.asarray(row[1]))
        scalar_ref.merge(np.asarray(row[1]), np.zeros(()), 1)
    assert one.mean.tobytes() == reference.mean.tobytes() and one.var.tobytes() == reference.var.tobytes()
    assert np.float64(scalar.mean).tobytes() == np.float64(scalar_ref.mean).tobytes()
    assert np.float64(scalar.var).tobytes() == np.float64(scalar_ref.var).tobytes()
    assert one.count == scalar.count == len(x)


def test_one_env_preprocessors_fold_each_step_in_with_merge_s_bits():
    # normalize_obs / scale_reward with one env take merge_one per step: the same bits as merge() of each row
    x = data(n=200)
    norm = NormalizeObs(NormalizeObsParams(), observation_space=BOX3)
    scale = ScaleReward(ScaleRewardParams(gamma=0.9), num_envs=1)
    obs_ref, ret_ref, ret = RunningMeanStd((3,)), RunningMeanStd(()), 0.0
    for t, row in enumerate(x):
        norm.obs(row[None])
        obs_ref.merge(row.astype(np.float64), np.zeros(3), 1)
        done = t % 50 == 49
        scale.reward(np.array([row[0]]), np.array([done]))
        ret = ret * 0.9 + np.float64(row[0])
        ret_ref.merge(np.asarray(ret), np.zeros(()), 1)
        ret = 0.0 if done else ret
    assert norm.rms.mean.tobytes() == obs_ref.mean.tobytes() and norm.rms.var.tobytes() == obs_ref.var.tobytes()
    assert np.float64(scale.rms.var).tobytes() == np.float64(ret_ref.var).tobytes()
    assert norm.rms.count == scale.rms.count == len(x)


def test_normalize_obs_output_is_standardized():
    norm = NormalizeObs(NormalizeObsParams(), observation_space=BOX3, num_envs=8)
    x = data()
    for batch in np.split(x, 250):  # [8, 3] batches, like one vector env step
        out = norm.obs(batch)
        assert out.dtype == np.float32 and out.shape == (8, 3)
    out = norm.obs(x, update=False)
    np.testing.assert_allclose(out.mean(axis=0), 0.0, atol=1e-3)
    np.testing.assert_allclose(out.std(axis=0), 1.0, atol=1e-3)


def test_normalize_obs_clips_and_update_false_leaves_stats_untouched():
    norm = NormalizeObs(NormalizeObsParams(clip=2.0), observation_space=BOX3)
    norm.obs(data()[:100])
    before = norm.state_dict()
    out = norm.obs(np.full((4, 3), 1e6, np.float32), update=False)
    np.testing.assert_array_equal(out, 2.0)
    after = norm.state_dict()
    for key in ("mean", "var", "count", "new_mean", "new_var", "new_count"):
        np.testing.assert_array_equal(after[key], before[key])


def test_normalize_obs_infers_shape_without_space():
    norm = NormalizeObs()
    with pytest.raises(RuntimeError, match="no statistics yet"):
        _ = norm.rms
    assert norm.state_dict() == {}
    norm.obs(np.ones((2, 5), np.float32))
    assert norm.rms.shape == (5,)


def test_merge_equals_one_stream_over_all_workers_data():
    x = data(n=3000)
    parts = np.split(x, [500, 1800])
    master = NormalizeObs(observation_space=BOX3)
    workers = [NormalizeObs(observation_space=BOX3) for _ in parts]
    # round 1: fresh workers collect, the master merges
    for worker, part in zip(workers, parts, strict=True):
        for batch in np.array_split(part, 7):
            worker.obs(batch)
    master.merge([w.state_dict() for w in workers])
    assert_stats_equal(master.rms, x)
    # sync back, then round 2: the shared history must not be counted once per worker
    for w in workers:
        w.load_state_dict(master.state_dict())
        assert_stats_equal(w.rms, x)
    y = data(seed=1, n=900)
    for worker, part in zip(workers, np.split(y, 3), strict=True):
        worker.obs(part)
    master.merge([w.state_dict() for w in workers])
    assert_stats_equal(master.rms, np.concatenate([x, y]))
    # a worker acting as the master: its own state in the list is skipped, not double-counted
    lead = workers[0]
    lead.load_state_dict(master.state_dict())
    for w in workers[1:]:
        w.load_state_dict(master.state_dict())
    z = data(seed=2, n=600)
    for worker, part in zip(workers, np.split(z, 3), strict=True):
        worker.obs(part)
    lead.merge([w.state_dict() for w in workers])
    assert_stats_equal(lead.rms, np.concatenate([x, y, z]))


def test_normalize_obs_state_round_trip():
    norm = NormalizeObs(observation_space=BOX3)
    norm.obs(data()[:50])
    state = norm.state_dict()
    assert isinstance(state["mean"], np.ndarray) and state["mean"].dtype == np.float64
    clone = NormalizeObs()
    clone.load_state_dict(state)
    probe = data(seed=5)[:10]
    np.testing.assert_array_equal(clone.obs(probe, update=False), norm.obs(probe, update=False))
    assert clone.state_dict()["new_count"] == 0  # loading is a sync point


def test_scale_reward_divides_by_return_std_and_resets_on_done():
    scale = ScaleReward(ScaleRewardParams(gamma=0.5, clip=100.0, epsilon=1e-12), num_envs=2)
    out = scale.reward(np.array([1.0, 1.0]), np.array([False, True]))
    np.testing.assert_allclose(scale.returns, [1.0, 0.0])  # the done env's return restarts
    assert out.dtype == np.float32
    scale.reward(np.array([2.0, 2.0]), np.array([False, False]))
    np.testing.assert_allclose(scale.returns, [0.5 * 1 + 2, 2.0])
    seen = np.array([1.0, 1.0, 2.5, 2.0])  # every return folded into the statistics so far
    assert scale.rms.count == 4
    np.testing.assert_allclose(scale.rms.var, seen.var())
    before = scale.state_dict()
    frozen = scale.reward(np.array([3.0, -3.0]), np.array([True, True]), update=False)
    np.testing.assert_allclose(frozen, np.array([3.0, -3.0]) / np.sqrt(seen.var()), rtol=1e-6)
    np.testing.assert_array_equal(scale.returns, before["returns"])  # update=False: no reset, no stats
    assert scale.rms.count == 4


def test_scale_reward_state_merge_and_shape_check():
    rng = np.random.default_rng(0)
    workers = [ScaleReward(num_envs=4) for _ in range(3)]
    single = RunningMeanStd()  # one stream over every return any worker saw
    for w in workers:
        for _ in range(20):
            r = rng.normal(size=4)
            single.update(w.returns * w.params.gamma + r)  # the returns before this step's done-reset
            w.reward(r, rng.random(4) < 0.1)
    master = ScaleReward(num_envs=4)
    master.merge([w.state_dict() for w in workers])
    np.testing.assert_allclose(master.rms.mean, single.mean)
    np.testing.assert_allclose(master.rms.var, single.var)
    clone = ScaleReward(num_envs=4)
    clone.load_state_dict(workers[0].state_dict())
    np.testing.assert_array_equal(clone.returns, workers[0].returns)
    with pytest.raises(ValueError, match="num_envs=4"):
        clone.reward(np.zeros(3), np.zeros(3, bool))


def test_clip_obs_and_reward():
    obs = ClipObs(ClipObsParams(low=-1.0, high=2.0)).obs(np.array([[-5, 0, 5]], np.float64))
    assert obs.dtype == np.float32 and obs.tolist() == [[-1.0, 0.0, 2.0]]
    rew = ClipReward(ClipRewardParams()).reward(np.array([-3.0, 0.5, 7.0]), np.zeros(3, bool))
    assert rew.dtype == np.float32 and rew.tolist() == [-1.0, 0.5, 1.0]


@pytest.mark.parametrize("target", [
    "rlightning_core.preprocess.builtins:NormalizeObs", "rlightning_core.preprocess.builtins:ScaleReward",
    "rlightning_core.preprocess.builtins:ClipObs", "rlightning_core.preprocess.builtins:ClipReward",
    "rlightning_core.buffer.rollout:RolloutBuffer", "rlightning_core.buffer.replay:ReplayBuffer",
])
def test_builtin_plugin_targets_exist(target):
    module, attr = target.split(":")
    assert callable(getattr(importlib.import_module(module), attr))
