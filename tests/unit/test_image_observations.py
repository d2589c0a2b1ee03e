"""Image observations in core: the encoders, uint8 storage in both builtin buffers (one-step and n-step replay,
rollout, checkpoint round trip) and what an Atari-sized replay costs."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rlightning_core.buffer.base import BufferSpec, Chunk
from rlightning_core.buffer.params import ReplayBufferParams, RolloutBufferParams
from rlightning_core.buffer.replay import ReplayBuffer
from rlightning_core.buffer.rollout import RolloutBuffer
from rlightning_core.errors import UserError
from rlightning_core.policy.encoders import MLP, NatureCNN, encoder_kind, is_image_space, make_encoder

ATARI = spaces.Box(0, 255, (4, 84, 84), np.uint8)


def _spec(obs_space, n=2, steps=4, **kw) -> BufferSpec:
    return BufferSpec(observation_space=obs_space, action_space=spaces.Discrete(3), num_envs=n, num_steps=steps,
                      **kw)


def _image_chunk(t: int, n: int, shape=(2, 36, 36), start=0, terminated=None) -> Chunk:
    """Frame ``k`` of env ``j`` at step ``s`` is filled with ``(s * 7 + j * 3 + k) % 256``; next_obs = step s+1."""
    steps = start + np.arange(t + 1)
    vals = (steps[:, None, None] * 7 + np.arange(n)[None, :, None] * 3 + np.arange(shape[0])[None, None, :]) % 256
    frames = np.broadcast_to(vals[..., None, None], (t + 1, n, *shape)).astype(np.uint8)
    data = {
        "obs": frames[:-1].copy(), "next_obs": frames[1:].copy(),
        "actions": np.zeros((t, n), np.int64), "rewards": np.ones((t, n), np.float32),
        "terminated": np.zeros((t, n), bool) if terminated is None else terminated,
        "truncated": np.zeros((t, n), bool),
    }
    for arr in data.values():
        arr.flags.writeable = False  # as Ray hands them over
    return Chunk(data=data, last_obs=frames[-1])


def test_image_spaces_choose_the_cnn_and_flat_spaces_the_mlp():
    flat = spaces.Box(-1, 1, (8,), np.float32)
    assert is_image_space(ATARI) and not is_image_space(flat)
    assert not is_image_space(spaces.Box(0, 1, (4, 84, 84), np.float32))  # float "images" are not pixels
    assert encoder_kind(ATARI) == "cnn" and encoder_kind(flat) == "mlp"
    assert encoder_kind(ATARI, "mlp") == "mlp"
    with pytest.raises(UserError, match=r"policy\.params\.encoder: 'cnn' needs channels-first image observations"):
        encoder_kind(flat, "cnn")
    with pytest.raises(UserError, match=r"at least 36x36 pixels .*, the observations are \(4, 16, 16\)"):
        encoder_kind(spaces.Box(0, 255, (4, 16, 16), np.uint8))
    with pytest.raises(UserError, match="must be one of auto, mlp, cnn, got 'resnet'"):
        encoder_kind(ATARI, "resnet")


def test_nature_cnn_scales_pixels_inside_and_has_the_papers_shape():
    torch.manual_seed(0)
    enc, width = make_encoder(ATARI)
    assert isinstance(enc, NatureCNN) and width == 512
    convs = [m for m in enc.convs if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (32, (8, 8), (4, 4)), (64, (4, 4), (2, 2)), (64, (3, 3), (1, 1))]
    assert enc.fc.in_features == 64 * 7 * 7
    pixels = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    out = enc(pixels)
    assert out.shape == (3, 512) and out.dtype == torch.float32
    torch.testing.assert_close(out, enc(pixels.float()), rtol=0, atol=0)  # uint8 or float pixel units alike
    mlp, width = make_encoder(spaces.Box(-1, 1, (2, 3), np.float32), hidden_sizes=[16, 8])
    assert isinstance(mlp, MLP) and width == 8 and mlp(torch.zeros(5, 2, 3)).shape == (5, 8)


def test_replay_stores_uint8_images_one_step_and_n_step():
    obs_space = spaces.Box(0, 255, (2, 36, 36), np.uint8)
    for n_step in (1, 3):
        buf = ReplayBuffer(ReplayBufferParams(capacity=64, n_step=n_step, gamma=0.5), spec=_spec(obs_space))
        buf.add(_image_chunk(4, 2))
        buf.add(_image_chunk(4, 2, start=4))
        t = buf.storage.tensors["obs"]
        assert t.dtype == torch.uint8 and t.nbytes == 64 * 2 * 36 * 36
        assert "next_obs" not in buf.storage.tensors  # shared: only the chunks' last steps are kept apart
        # apart: each chunk's last step per env (one-step); n-step successors mostly arrive with the next chunk
        assert buf.pool.live == {1: 2 * 2, 3: 10}[n_step] and buf.pool.data.dtype == torch.uint8
        batch = buf.sample(16, generator=torch.Generator().manual_seed(0))
        assert batch["obs"].dtype == torch.uint8 and batch["next_obs"].dtype == torch.uint8
        # next_obs is the frame n steps later: value + 7 * n (mod 256), channel by channel
        want = (batch["obs"][:, :, 0, 0].long() + 7 * n_step) % 256
        assert torch.equal(batch["next_obs"][:, :, 0, 0].long(), want)
        state = buf.state_dict()
        raw = io.BytesIO()
        torch.save(state, raw)
        raw.seek(0)
        back = ReplayBuffer(ReplayBufferParams(capacity=64, n_step=n_step, gamma=0.5), spec=_spec(obs_space))
        back.load_state_dict(torch.load(raw, weights_only=True))
        assert back.storage.tensors["obs"].dtype == torch.uint8
        assert torch.equal(back.storage.tensors["obs"], buf.storage.tensors["obs"])


def test_rollout_buffer_stores_uint8_images_and_yields_uint8_minibatches():
    obs_space = spaces.Box(0, 255, (2, 36, 36), np.uint8)
    spec = _spec(obs_space, extras_spec={"value": ((), np.float32)})
    buf = RolloutBuffer(RolloutBufferParams(), spec=spec)
    chunk = _image_chunk(4, 2)
    chunk.data["value"] = np.zeros((4, 2), np.float32)
    chunk.last_values = np.zeros(2, np.float32)
    buf.add(chunk)
    assert buf["obs"].dtype == torch.uint8 and buf["obs"].nbytes == 4 * 2 * 2 * 36 * 36
    np.testing.assert_array_equal(buf["obs"].numpy(), chunk.data["obs"])
    buf.compute_returns_and_advantages(gamma=0.9, gae_lambda=0.9)
    mbs = list(buf.minibatches(3, generator=torch.Generator().manual_seed(0)))
    assert all(mb["obs"].dtype == torch.uint8 for mb in mbs) and sum(len(mb["obs"]) for mb in mbs) == 8


def test_an_atari_sized_replay_costs_one_uint8_frame_stack_per_transition_plus_the_kept_apart():
    """What docs/benchmarks.md quotes: 28,252 bytes per transition of (4, 84, 84) frame stacks (56,468 with
    next_obs stored apart), plus 28,224 per next_obs that is no later transition's obs."""
    spec = BufferSpec(observation_space=ATARI, action_space=spaces.Discrete(6), num_envs=8, num_steps=1)
    shared = ReplayBuffer(ReplayBufferParams(capacity=1000), spec=spec)
    apart = ReplayBuffer(ReplayBufferParams(capacity=1000, share_next_obs=False), spec=spec)
    sizes = {k: t.nbytes for k, t in shared.storage.tensors.items()}
    assert sizes["obs"] == 1000 * 4 * 84 * 84 and "next_obs" not in sizes
    assert sum(sizes.values()) + shared.next_ref.nbytes == 1000 * 28_252
    sizes = {k: t.nbytes for k, t in apart.storage.tensors.items()}
    assert sizes["obs"] == sizes["next_obs"] == 1000 * 4 * 84 * 84
    assert sum(sizes.values()) == 1000 * 56_468


def _runner_chunks(num_chunks: int, steps: int, n: int = 3):
    """Chunks from a real env runner: a uint8 SpaceEnv with short episodes (terminated and truncated)."""
    from rlightning_core.env.runner import EnvRunner
    from rlightning_core.policy.base import PolicyRole
    from rlightning_core.testing.doubles import SpaceEnv, TinyPolicy, TinyPolicyParams

    obs_space, act_space = spaces.Box(0, 255, (2, 5, 5), np.uint8), spaces.Discrete(3)
    env = SpaceEnv(obs_space, act_space, num_envs=n, seed=3, max_episode_steps=5, terminate_prob=0.2)
    policy = TinyPolicy(TinyPolicyParams(), observation_space=obs_space, action_space=act_space,
                        role=PolicyRole.ROLLOUT, seed=0)
    runner = EnvRunner(env, policy, needs_next_obs=True)
    runner.reset(seed=3)
    return obs_space, n, [runner.collect(steps)[0] for _ in range(num_chunks)]


@pytest.mark.parametrize("n_step", [1, 3])
def test_shared_next_obs_sample_exactly_what_stored_next_obs_do(n_step):
    obs_space, n, chunks = _runner_chunks(12, 6)
    spec = BufferSpec(observation_space=obs_space, action_space=spaces.Discrete(3), num_envs=n, num_steps=6)
    params = {"capacity": 50, "n_step": n_step, "gamma": 0.9}  # 12 x 18 steps: wraps around four times
    shared = ReplayBuffer(ReplayBufferParams(**params), spec=spec)
    apart = ReplayBuffer(ReplayBufferParams(**params, share_next_obs=False), spec=spec)
    assert shared.share_next_obs and not apart.share_next_obs
    for chunk in chunks:
        shared.add(chunk)
        apart.add(chunk)
        size = len(shared)
        refs = shared.next_ref[:size]
        assert shared.pool.live == int((refs < 0).sum()) < size  # one pool slot per transition kept apart
        a = shared.sample(64, generator=torch.Generator().manual_seed(size))
        b = apart.sample(64, generator=torch.Generator().manual_seed(size))
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    references = int((shared.next_ref[: len(shared)] >= 0).sum())
    # one-step: most are references; n-step: only those whose successor came in the same chunk
    assert references > (len(shared) // 2 if n_step == 1 else 0)
    assert shared.pool.used < shared.storage.capacity  # freed slots were reused

    raw = io.BytesIO()
    torch.save(shared.state_dict(), raw)
    raw.seek(0)
    back = ReplayBuffer(ReplayBufferParams(**params), spec=spec)
    back.load_state_dict(torch.load(raw, weights_only=True))
    a = back.sample(64, generator=torch.Generator().manual_seed(1))
    b = apart.sample(64, generator=torch.Generator().manual_seed(1))
    assert all(torch.equal(a[k], b[k]) for k in a)
