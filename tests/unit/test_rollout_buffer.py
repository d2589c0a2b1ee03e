"""RolloutBuffer: storage layout, chunks into columns, GAE against hand-computed values, minibatches."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rlightning_core.buffer.base import BufferSpec, Chunk
from rlightning_core.buffer.params import RolloutBufferParams
from rlightning_core.buffer.rollout import RolloutBuffer

EXTRAS = {"log_prob": ((), np.float32), "value": ((), np.float32)}


def make_buffer(t=4, n=2, obs_space=None, act_space=None, extras=EXTRAS, labels=()) -> RolloutBuffer:
    spec = BufferSpec(
        observation_space=obs_space or spaces.Box(-np.inf, np.inf, (3,), np.float32),
        action_space=act_space or spaces.Discrete(2),
        num_envs=n, num_steps=t, extras_spec=dict(extras), column_labels=list(labels),
    )
    return RolloutBuffer(RolloutBufferParams(), spec=spec)


def make_chunk(t, n, column=0, obs_dim=3, rewards=None, values=None, terminated=None, truncated=None,
               bootstrap=None, last_values=None, label="", actions=None) -> Chunk:
    data = {
        "obs": np.arange(t * n * obs_dim, dtype=np.float32).reshape(t, n, obs_dim),
        "actions": actions if actions is not None else np.zeros((t, n), dtype=np.int64),
        "rewards": np.zeros((t, n), np.float32) if rewards is None else np.asarray(rewards, np.float32),
        "terminated": np.zeros((t, n), bool) if terminated is None else np.asarray(terminated, bool),
        "truncated": np.zeros((t, n), bool) if truncated is None else np.asarray(truncated, bool),
        "log_prob": np.full((t, n), -0.5, np.float32),
        "value": np.zeros((t, n), np.float32) if values is None else np.asarray(values, np.float32),
    }
    if bootstrap is not None:
        data["bootstrap_values"] = np.asarray(bootstrap, np.float32)
    lv = np.zeros(n, np.float32) if last_values is None else np.asarray(last_values, np.float32)
    return Chunk(data=data, last_obs=np.zeros((n, obs_dim), np.float32), last_values=lv, column=column,
                 env_label=label)


def col(x):
    """A [T] list as a [T, 1] array."""
    return np.asarray(x)[:, None]


def test_layout_dtypes_and_shapes():
    buf = make_buffer(t=3, n=2, obs_space=spaces.Discrete(5), act_space=spaces.MultiDiscrete([2, 3]))
    assert buf["obs"].shape == (3, 2) and buf["obs"].dtype == torch.int64
    assert buf["actions"].shape == (3, 2, 2) and buf["actions"].dtype == torch.int64
    box = make_buffer(t=3, n=2, act_space=spaces.Box(-1, 1, (4,), np.float32))
    assert box["actions"].shape == (3, 2, 4) and box["actions"].dtype == torch.float32
    assert box["obs"].shape == (3, 2, 3) and box["obs"].dtype == torch.float32
    assert box["terminated"].dtype == torch.bool and box["log_prob"].shape == (3, 2)
    with pytest.raises(TypeError, match="FlattenObservation"):
        make_buffer(obs_space=spaces.Dict({"a": spaces.Discrete(2)}))


def test_gae_hand_computed_termination_truncation_and_last_values():
    # gamma = lambda = 0.5, so gamma * lambda = 0.25. Column 0: terminated at t=1; column 1: truncated at t=2
    # with bootstrap value 6. Both columns bootstrap from last_values (5 and 4) at t = T-1 = 3.
    buf = make_buffer(t=4, n=2)
    buf.add(make_chunk(4, 1, column=0, rewards=col([1, 1, 1, 1]), values=col([1, 2, 3, 4]),
                       terminated=col([0, 1, 0, 0]), last_values=[5.0]))
    buf.add(make_chunk(4, 1, column=1, rewards=col([0, 2, 0, 1]), values=col([2, 2, 2, 2]),
                       truncated=col([0, 0, 1, 0]), bootstrap=col([0, 0, 6, 0]), last_values=[4.0]))
    assert len(buf) == 8 and buf.full
    buf.compute_returns_and_advantages(gamma=0.5, gae_lambda=0.5)
    # column 0: d3 = 1 + .5*5 - 4 = -.5; d2 = 1 + .5*4 - 3 = 0; d1 = 1 - 2 = -1 (terminal);
    # d0 = 1 + .5*2 - 1 = 1
    # A3 = -.5, A2 = 0 + .25*(-.5) = -.125, A1 = -1 (cut), A0 = 1 + .25*(-1) = .75
    # column 1: d3 = 1 + .5*4 - 2 = 1; d2 = 0 + .5*6 - 2 = 1 (bootstrap, then cut); d1 = 2 + 1 - 2 = 1;
    # d0 = 0 + 1 - 2 = -1 -> A = [-1 + .25*1.25, 1 + .25*1, 1, 1]
    expected_adv = np.array([[0.75, -0.6875], [-1.0, 1.25], [-0.125, 1.0], [-0.5, 1.0]], np.float32)
    values = np.array([[1, 2], [2, 2], [3, 2], [4, 2]], np.float32)
    np.testing.assert_allclose(buf["advantages"].numpy(), expected_adv, rtol=0, atol=1e-6)
    np.testing.assert_allclose(buf["returns"].numpy(), expected_adv + values, rtol=0, atol=1e-6)


def reference_gae(rewards, values, term, trunc, boot, last_values, gamma, lam):
    """Straightforward per-column, per-step GAE."""
    t_len, n = rewards.shape
    adv = np.zeros((t_len, n))
    for j in range(n):
        running = 0.0
        for t in reversed(range(t_len)):
            if term[t, j]:
                next_v = 0.0
            elif trunc[t, j]:
                next_v = boot[t, j]
            else:
                next_v = values[t + 1, j] if t + 1 < t_len else last_values[j]
            if term[t, j] or trunc[t, j]:
                running = 0.0
            delta = rewards[t, j] + gamma * next_v - values[t, j]
            running = delta + gamma * lam * running
            adv[t, j] = running
    return adv


def test_gae_matches_reference_on_random_data():
    rng = np.random.default_rng(0)
    t, n = 64, 8
    rewards = rng.normal(size=(t, n)).astype(np.float32)
    values = rng.normal(size=(t, n)).astype(np.float32)
    term = rng.random((t, n)) < 0.05
    trunc = (rng.random((t, n)) < 0.05) & ~term
    boot = np.where(trunc, rng.normal(size=(t, n)), 0).astype(np.float32)
    last = rng.normal(size=n).astype(np.float32)
    buf = make_buffer(t=t, n=n)
    buf.add(make_chunk(t, n, rewards=rewards, values=values, terminated=term, truncated=trunc, bootstrap=boot,
                       last_values=last))
    buf.compute_returns_and_advantages(0.99, 0.95)
    ref = reference_gae(rewards, values, term, trunc, boot, last, 0.99, 0.95)
    np.testing.assert_allclose(buf["advantages"].numpy(), ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(buf["returns"].numpy(), ref + values, rtol=1e-4, atol=1e-4)


def test_chunks_fill_disjoint_columns():
    buf = make_buffer(t=3, n=5)
    a = make_chunk(3, 2, column=0)
    b = make_chunk(3, 3, column=2)
    b.data["obs"] += 1000
    buf.add(b)
    assert len(buf) == 9 and not buf.full
    buf.add(a)
    assert len(buf) == 15 and buf.full
    np.testing.assert_array_equal(buf["obs"][:, :2].numpy(), a.data["obs"])
    np.testing.assert_array_equal(buf["obs"][:, 2:].numpy(), b.data["obs"])
    assert torch.all(buf["bootstrap_values"] == 0)
    buf.reset()
    assert len(buf) == 0 and not buf.full


def test_add_rejects_bad_chunks():
    buf = make_buffer(t=4, n=2)
    with pytest.raises(ValueError, match="num_steps=4"):
        buf.add(make_chunk(3, 2))
    with pytest.raises(ValueError, match=r"columns 1\.\.2"):
        buf.add(make_chunk(4, 2, column=1))
    chunk = make_chunk(4, 2)
    del chunk.data["log_prob"]
    with pytest.raises(KeyError, match="log_prob"):
        buf.add(chunk)


def test_gae_requires_filled_columns_last_values_and_value():
    buf = make_buffer(t=2, n=2)
    buf.add(make_chunk(2, 1, column=0))
    with pytest.raises(RuntimeError, match=r"columns \[1\] were not filled"):
        buf.compute_returns_and_advantages(0.99, 0.95)
    chunk = make_chunk(2, 1, column=1)
    chunk.last_values = None
    buf.add(chunk)
    with pytest.raises(RuntimeError, match="last_values"):
        buf.compute_returns_and_advantages(0.99, 0.95)
    no_value = make_buffer(t=2, n=1, extras={"log_prob": ((), np.float32)})
    with pytest.raises(KeyError, match="'value'"):
        no_value.compute_returns_and_advantages(0.99, 0.95)
    with pytest.raises(RuntimeError, match="compute_returns_and_advantages"):
        next(buf.minibatches(4))


@pytest.mark.parametrize(("t", "n", "batch_size"), [(5, 3, 4), (4, 2, 8), (4, 2, 3), (3, 1, 100)])
def test_minibatches_cover_every_step_once(t, n, batch_size):
    buf = make_buffer(t=t, n=n, obs_space=spaces.Box(-np.inf, np.inf, (1,), np.float32))
    chunk = make_chunk(t, n, obs_dim=1)
    chunk.data["obs"] = np.arange(t * n, dtype=np.float32).reshape(t, n, 1)  # obs = flat step id
    buf.add(chunk)
    buf.compute_returns_and_advantages(0.99, 0.95)
    batches = list(buf.minibatches(batch_size, generator=torch.Generator().manual_seed(0)))
    total = t * n
    sizes = [len(b["obs"]) for b in batches]
    tail = [total % batch_size] if total % batch_size else []
    assert sizes == [batch_size] * (total // batch_size) + tail
    seen = torch.cat([b["obs"][:, 0] for b in batches]).long().sort().values
    assert torch.equal(seen, torch.arange(total))
    assert set(batches[0]) == {"obs", "actions", "advantages", "returns", "log_prob", "value"}
    # the rows of each batch stay aligned: the advantage of a step travels with its obs
    adv_flat = buf["advantages"].reshape(-1)
    for b in batches:
        assert torch.equal(b["advantages"], adv_flat[b["obs"][:, 0].long()])


def test_minibatches_are_reproducible_and_postprocessed():
    buf = make_buffer(t=4, n=2)
    buf.add(make_chunk(4, 2))
    buf.compute_returns_and_advantages(0.99, 0.95)
    buf.postprocess_fn = lambda batch: {**batch, "tag": torch.ones(1)}
    one = [b["obs"] for b in buf.minibatches(3, torch.Generator().manual_seed(7))]
    two = [b["obs"] for b in buf.minibatches(3, torch.Generator().manual_seed(7))]
    assert all(torch.equal(x, y) for x, y in zip(one, two, strict=True))
    assert all("tag" in b for b in buf.minibatches(3))


def test_preprocess_fn_applies_to_chunks_and_state_dict_is_empty():
    buf = make_buffer(t=2, n=1)

    def double_rewards(chunk: Chunk) -> Chunk:
        chunk.data["rewards"] = chunk.data["rewards"] * 2
        return chunk

    buf.preprocess_fn = double_rewards
    buf.add(make_chunk(2, 1, rewards=col([1.0, 3.0])))
    np.testing.assert_array_equal(buf["rewards"][:, 0].numpy(), [2.0, 6.0])
    assert buf.state_dict() == {}


def test_read_only_arrays_are_accepted():
    buf = make_buffer(t=2, n=2)
    chunk = make_chunk(2, 2)
    for arr in chunk.data.values():
        arr.flags.writeable = False  # as numpy arrays arrive from Ray's object store
    buf.add(chunk)  # no "not writable" warning (warnings are errors in this suite)
    assert len(buf) == 4


def test_per_label_columns_from_spec_and_from_chunks():
    labelled = make_buffer(t=2, n=4, labels=["cartpole", "cartpole", "acrobot", "cartpole"])
    cols = labelled.per_label_columns()
    assert list(cols) == ["cartpole", "acrobot"]
    assert cols["cartpole"].tolist() == [0, 1, 3] and cols["acrobot"].tolist() == [2]
    unlabelled = make_buffer(t=2, n=3)
    unlabelled.add(make_chunk(2, 2, column=0, label="a"))
    unlabelled.add(make_chunk(2, 1, column=2, label="b"))
    assert {k: v.tolist() for k, v in unlabelled.per_label_columns().items()} == {"a": [0, 1], "b": [2]}
