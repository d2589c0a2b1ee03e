"""ReplayBuffer and its pieces: circular storage, uniform / prioritized samplers, sum tree, n-step returns."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rlightning_core.buffer.base import BufferSpec, Chunk
from rlightning_core.buffer.params import ReplayBufferParams
from rlightning_core.buffer.replay import ReplayBuffer
from rlightning_core.buffer.samplers import PrioritizedSampler, Sampler, UniformSampler
from rlightning_core.buffer.storage import Storage, TensorStorage
from rlightning_core.buffer.sumtree import SumTree


def make_buffer(n=1, obs_dim=1, extras=None, seed=0, **params) -> ReplayBuffer:
    spec = BufferSpec(observation_space=spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
                      action_space=spaces.Discrete(3), num_envs=n, num_steps=1, extras_spec=extras or {},
                      seed=seed)
    return ReplayBuffer(ReplayBufferParams(**params), spec=spec)


def make_chunk(t, n=1, column=0, start=0, rewards=None, terminated=None, truncated=None, obs_dim=1) -> Chunk:
    """obs = global step id (start + t) * 10 + column; next_obs = obs + 0.5 (distinct from every obs)."""
    steps = (start + np.arange(t))[:, None] * 10 + (column + np.arange(n))[None, :]
    obs = np.repeat(steps[..., None], obs_dim, axis=2).astype(np.float32)
    data = {
        "obs": obs,
        "next_obs": obs + 0.5,
        "actions": np.ones((t, n), np.int64),
        "rewards": np.ones((t, n), np.float32) if rewards is None else np.asarray(rewards, np.float32),
        "terminated": np.zeros((t, n), bool) if terminated is None else np.asarray(terminated, bool),
        "truncated": np.zeros((t, n), bool) if truncated is None else np.asarray(truncated, bool),
    }
    return Chunk(data=data, last_obs=obs[-1], column=column)


def col(x):
    return np.asarray(x)[:, None]


def stored(buf: ReplayBuffer, key: str) -> np.ndarray:
    return buf.storage.tensors[key][: len(buf)].numpy()


# -- storage and uniform sampling ---------------------------------------------------------------------------
def test_circular_overwrite_drops_oldest():
    buf = make_buffer(capacity=5)
    buf.add(make_chunk(8))
    assert len(buf) == 5
    assert sorted(stored(buf, "obs")[:, 0].tolist()) == [30, 40, 50, 60, 70]
    buf2 = make_buffer(capacity=5)
    buf2.add(make_chunk(4))
    buf2.add(make_chunk(4, start=4))
    assert len(buf2) == 5
    # wrapped write: slots 4, 0, 1, 2 hold steps 4..7; slot 3 still holds step 3
    assert stored(buf2, "obs")[:, 0].tolist() == [50, 60, 70, 30, 40]
    assert buf2.storage.cursor == 3


def test_storage_protocols_and_field_dtypes():
    buf = make_buffer(n=2, capacity=10, gamma=0.9)
    assert isinstance(buf.storage, Storage) and isinstance(buf.sampler, Sampler)
    assert isinstance(buf.sampler, UniformSampler)
    assert buf.needs_next_obs
    buf.add(make_chunk(3, n=2, terminated=[[0, 0], [0, 1], [0, 0]]))
    assert len(buf) == 6
    # time-major: step 0 of both columns, then step 1 ...
    assert stored(buf, "obs")[:, 0].tolist() == [0, 1, 10, 11, 20, 21]
    assert stored(buf, "terminated").tolist() == [0, 0, 0, 1, 0, 0]
    np.testing.assert_allclose(stored(buf, "discount"), 0.9)
    np.testing.assert_allclose(stored(buf, "next_obs"), stored(buf, "obs") + 0.5)


def test_numpy_and_tensor_writes_store_the_same_values_in_every_dtype():
    """A CPU storage writes numpy batches through numpy views; the values equal a torch ``copy_`` of the same
    batch, casts included, and a field numpy cannot view (bfloat16) is written through torch."""
    layout = {"f32": ((2,), torch.float32), "flag": ((), torch.bool), "u8": ((2,), torch.uint8),
              "i64": ((), torch.int64), "bf16": ((2,), torch.bfloat16)}
    batch = {"f32": np.array([[1.7, -2.5], [3.0, 1e-40], [0.1, 2.0]], np.float64),
             "flag": np.array([0.0, 0.5, 2.0]), "u8": np.array([[0, 255], [7, 8], [1, 2]], np.int64),
             "i64": np.array([True, False, True]), "bf16": np.array([[1.5, 2.25], [3.0, 4.0], [5.0, 6.0]])}
    by_numpy, by_torch = TensorStorage(4, layout), TensorStorage(4, layout)
    for step in range(3):  # the third write wraps around the end
        by_numpy.write({k: v[: 2] for k, v in batch.items()})
        by_torch.write({k: torch.from_numpy(v[: 2]) for k, v in batch.items()})
        assert by_numpy.cursor == by_torch.cursor == (2 * (step + 1)) % 4
    for name in layout:
        assert torch.equal(by_numpy.tensors[name], by_torch.tensors[name]), name
    assert by_numpy.tensors["flag"][:2].tolist() == [False, True]
    assert by_numpy.tensors["u8"][1].tolist() == [7, 8]


def test_uniform_sample_keys_and_valid_indices():
    buf = make_buffer(capacity=100, extras={"log_prob": ((), np.float32)})
    chunk = make_chunk(7)
    chunk.data["log_prob"] = np.full((7, 1), -1.0, np.float32)
    buf.add(chunk)
    batch = buf.sample(256, generator=torch.Generator().manual_seed(0))
    assert set(batch) == {"obs", "actions", "rewards", "next_obs", "terminated", "discount", "log_prob",
                          "indices", "weights"}
    assert batch["obs"].shape == (256, 1) and batch["actions"].dtype == torch.int64
    assert batch["terminated"].dtype == torch.float32
    assert int(batch["indices"].min()) >= 0 and int(batch["indices"].max()) < 7
    assert set(batch["indices"].tolist()) == set(range(7))
    assert torch.equal(batch["obs"][:, 0], batch["indices"].float() * 10)
    assert torch.all(batch["weights"] == 1)
    buf.update_priorities(batch["indices"], torch.ones(256))  # a no-op for uniform sampling


def test_sample_errors_and_missing_next_obs():
    buf = make_buffer(capacity=4)
    with pytest.raises(RuntimeError, match="empty"):
        buf.sample(2)
    chunk = make_chunk(2)
    del chunk.data["next_obs"]
    with pytest.raises(KeyError, match="next_obs"):
        buf.add(chunk)
    with pytest.raises(ValueError, match="columns"):
        buf.add(make_chunk(2, column=1))


def test_custom_storage_and_sampler_are_used():
    spec_buf = make_buffer()
    storage = TensorStorage(3, ReplayBuffer.layout(spec_buf.spec))
    sampler = PrioritizedSampler(3, alpha=1.0)
    buf = ReplayBuffer(ReplayBufferParams(capacity=1000), spec=spec_buf.spec, storage=storage,
                       sampler=sampler)
    buf.add(make_chunk(5))
    assert buf.storage is storage and len(buf) == 3
    assert buf.sample(4)["indices"].max() < 3


# -- sum tree and prioritized sampling ----------------------------------------------------------------------
def test_sumtree_sums_minimum_and_prefix_search():
    tree = SumTree(5)  # 8 leaves internally: padding must never be found
    tree.update(np.arange(5), np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert tree.total == 15.0 and tree.min == 1.0
    leaves = tree.find_prefixsum(np.array([0.0, 0.99, 1.0, 2.5, 3.0, 5.99, 6.0, 14.999]))
    assert leaves.tolist() == [0, 0, 1, 1, 2, 2, 3, 4]
    tree.update(np.array([0, 0, 4]), np.array([9.0, 0.5, 0.0]))  # duplicates: the last value wins
    assert tree.total == pytest.approx(9.5) and tree.min == 0.0
    assert tree[np.array([0, 4])].tolist() == [0.5, 0.0]
    with pytest.raises(ValueError, match="finite"):
        tree.update(np.array([1]), np.array([np.nan]))
    single = SumTree(1)
    single.update(np.array([0]), np.array([2.0]))
    assert single.total == 2.0 and single.find_prefixsum(np.array([1.0])).tolist() == [0]


def sample_frequencies(buf, draws=40_000, batch=64, seed=0) -> np.ndarray:
    gen = torch.Generator().manual_seed(seed)
    counts = np.zeros(len(buf))
    for _ in range(draws // batch):
        counts += np.bincount(buf.sample(batch, gen)["indices"].numpy(), minlength=len(buf))
    return counts / counts.sum()


def test_prioritized_proportions_follow_priorities():
    buf = make_buffer(capacity=4, prioritized=True, alpha=1.0, priority_eps=1e-9)
    buf.add(make_chunk(4))
    assert isinstance(buf.sampler, PrioritizedSampler)
    np.testing.assert_allclose(sample_frequencies(buf, draws=4000), 0.25, atol=0.02)  # new: max priority
    buf.update_priorities(torch.arange(4), torch.tensor([1.0, -2.0, 3.0, 4.0]))  # |td| is what counts
    np.testing.assert_allclose(sample_frequencies(buf), [0.1, 0.2, 0.3, 0.4], atol=0.02 * 0.4)
    buf.update_priorities(np.arange(4), np.array([4.0, 3.0, 2.0, 1.0]))
    np.testing.assert_allclose(sample_frequencies(buf), [0.4, 0.3, 0.2, 0.1], atol=0.02 * 0.4)


def test_alpha_flattens_priorities_and_new_items_get_max_priority():
    buf = make_buffer(capacity=8, prioritized=True, alpha=0.5, priority_eps=1e-9)
    buf.add(make_chunk(2))
    buf.update_priorities(np.array([0, 1]), np.array([1.0, 16.0]))
    np.testing.assert_allclose(buf.sampler.priorities(np.array([0, 1])), [1.0, 4.0])
    buf.add(make_chunk(1, start=2))
    np.testing.assert_allclose(buf.sampler.priorities(np.array([2])), [4.0])  # max seen, 16 ** 0.5


def test_importance_weights_and_beta_annealing():
    buf = make_buffer(capacity=4, prioritized=True, alpha=1.0, beta=0.5, priority_eps=1e-9)
    buf.add(make_chunk(4))
    buf.update_priorities(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    batch = buf.sample(512, torch.Generator().manual_seed(1))
    p = np.array([1.0, 2.0, 3.0, 4.0])
    # w_i = (N P(i))^-beta / max_k (N P(k))^-beta = (p_i / p_min)^-beta
    expected = (p[batch["indices"].numpy()] / p.min()) ** -0.5
    np.testing.assert_allclose(batch["weights"].numpy(), expected, rtol=1e-6)
    assert float(batch["weights"].max()) <= 1.0
    buf.set_progress(1.0)
    assert buf.sampler.beta == 1.0
    batch = buf.sample(64)
    np.testing.assert_allclose(batch["weights"].numpy(), p.min() / p[batch["indices"].numpy()], rtol=1e-6)
    buf.set_progress(0.5)
    assert buf.sampler.beta == pytest.approx(0.75)
    assert torch.all(buf.sample(64, beta=0.0)["weights"] == 1)


def test_prioritized_never_samples_unwritten_slots():
    buf = make_buffer(capacity=1000, prioritized=True)
    buf.add(make_chunk(3))
    idx = buf.sample(10_000)["indices"]
    assert int(idx.max()) < 3


# -- n-step returns -----------------------------------------------------------------------------------------
def test_n_step_returns_hand_checked_across_chunks_and_episode_ends():
    # n = 3, gamma = 0.5, one column. Steps 0..7: rewards 1, 2, 4, ..., 128; step 1 terminates,
    # step 5 truncates.
    buf = make_buffer(capacity=100, n_step=3, gamma=0.5)
    buf.add(make_chunk(4, rewards=col([1, 2, 4, 8]), terminated=col([0, 1, 0, 0])))
    # steps 0, 1 end at the termination; steps 2, 3 wait for look-ahead
    assert len(buf) == 2
    buf.add(make_chunk(4, start=4, rewards=col([16, 32, 64, 128]), truncated=col([0, 1, 0, 0])))
    assert len(buf) == 6  # steps 6, 7 pending
    assert stored(buf, "obs")[:, 0].tolist() == [0, 10, 20, 30, 40, 50]
    np.testing.assert_allclose(stored(buf, "rewards"), [
        1 + 0.5 * 2,                    # step 0: 0..1, terminated at 1
        2,                              # step 1
        4 + 0.5 * 8 + 0.25 * 16,        # step 2: 2..4, across the chunk boundary
        8 + 0.5 * 16 + 0.25 * 32,       # step 3: 3..5
        16 + 0.5 * 32,                  # step 4: 4..5, truncated at 5
        32,                             # step 5
    ])
    assert stored(buf, "next_obs")[:, 0].tolist() == [10.5, 10.5, 40.5, 50.5, 50.5, 50.5]
    assert stored(buf, "terminated").tolist() == [1, 1, 0, 0, 0, 0]  # truncation still bootstraps
    np.testing.assert_allclose(stored(buf, "discount"), [0.25, 0.5, 0.125, 0.125, 0.25, 0.5])
    buf.add(make_chunk(2, start=8, rewards=col([256, 512]), terminated=col([0, 1])))
    assert len(buf) == 10  # steps 6..9 all complete now (9 terminates)
    np.testing.assert_allclose(stored(buf, "rewards")[6:], [64 + 64 + 64, 128 + 128 + 128, 256 + 256, 512])
    assert stored(buf, "terminated")[6:].tolist() == [0, 1, 1, 1]  # step 7: window 7..9 ends at 9


def test_n_step_columns_from_separate_chunks_keep_their_own_look_ahead():
    buf = make_buffer(n=2, capacity=100, n_step=2, gamma=0.5)
    buf.add(make_chunk(2, column=0, rewards=col([1, 2])))
    buf.add(make_chunk(3, column=1, rewards=col([10, 20, 30]), terminated=col([0, 0, 1])))
    assert len(buf) == 1 + 3
    buf.add(make_chunk(1, column=0, start=2, rewards=col([4])))
    assert len(buf) == 5
    obs = stored(buf, "obs")[:, 0].tolist()
    rewards = dict(zip(obs, stored(buf, "rewards").tolist(), strict=True))
    assert rewards == {0: 1 + 1, 1: 10 + 10, 11: 20 + 15, 21: 30, 10: 2 + 2}
    assert dict(zip(obs, stored(buf, "next_obs")[:, 0].tolist(), strict=True)) == {
        0: 10.5, 1: 11.5, 11: 21.5, 21: 21.5, 10: 20.5}


def test_n_step_with_short_chunks():
    buf = make_buffer(capacity=100, n_step=4, gamma=1.0)
    for start in range(6):  # chunks of one step each
        buf.add(make_chunk(1, start=start))
    assert len(buf) == 3
    np.testing.assert_allclose(stored(buf, "rewards"), [4, 4, 4])
    assert stored(buf, "next_obs")[:, 0].tolist() == [30.5, 40.5, 50.5]


# -- state --------------------------------------------------------------------------------------------------
def test_state_dict_round_trip_through_torch_save():
    kwargs = dict(capacity=16, prioritized=True, alpha=0.7, n_step=3, gamma=0.9)
    buf = make_buffer(n=2, **kwargs)
    buf.add(make_chunk(5, n=2, terminated=[[0, 0], [1, 0], [0, 0], [0, 0], [0, 0]]))
    buf.update_priorities(np.arange(len(buf)), np.linspace(0.1, 3.0, len(buf)))
    buf.set_progress(0.3)
    buf.sample(8)
    raw = io.BytesIO()
    torch.save(buf.state_dict(), raw)
    raw.seek(0)
    restored = make_buffer(n=2, seed=123, **kwargs)
    restored.load_state_dict(torch.load(raw, weights_only=True))
    assert len(restored) == len(buf)
    one, two = buf.sample(32), restored.sample(32)  # same generator state, same tree
    for key in one:
        assert torch.equal(one[key], two[key]), key
    nxt = make_chunk(4, n=2, start=5, truncated=[[0, 1], [0, 0], [0, 0], [0, 0]])
    buf.add(nxt)
    restored.add(make_chunk(4, n=2, start=5, truncated=[[0, 1], [0, 0], [0, 0], [0, 0]]))
    for key, tensor in buf.storage.tensors.items():
        assert torch.equal(tensor, restored.storage.tensors[key]), key  # pending look-ahead restored too
    with pytest.raises(ValueError, match="capacity"):
        make_buffer(n=2, capacity=8, prioritized=True).load_state_dict(buf.state_dict())


def test_a_resume_with_another_number_of_envs_keeps_the_transitions_and_drops_the_tails(caplog):
    kwargs = dict(capacity=32, n_step=3, gamma=0.9)
    buf = make_buffer(n=2, **kwargs)
    buf.add(make_chunk(6, n=2))  # no episode ended: the last n-1 steps of each column wait for their returns
    assert buf._pending.tolist() == [2, 2]
    wider = make_buffer(n=3, **kwargs)  # the resumed run has more env workers
    with caplog.at_level("WARNING", logger="rlightning"):
        wider.load_state_dict(buf.state_dict())
    assert "2 env columns, this run 3" in caplog.text
    assert len(wider) == len(buf) == 8
    assert torch.equal(wider.storage.tensors["obs"][:8], buf.storage.tensors["obs"][:8])
    assert wider._pending.tolist() == [0, 0, 0] and not wider._tails
    wider.add(make_chunk(4, n=3, start=6))  # and it goes on filling all three columns
    assert len(wider) == 8 + 3 * (4 - 2)
