"""PPO with Dict observations and action masking: legal actions only, the masked distribution, learning."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st
from rlightning_ppo.params import PPOParams
from rlightning_ppo.policy import PPOPolicy

import rlightning_core.testing.dict_envs  # noqa: F401  (registers the ids)
from rlightning_core.errors import UnsupportedSpaceError
from rlightning_core.spaces import ACTION_MASK, FlatDict

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[3]
N = 6


def _masked_space() -> FlatDict:
    return FlatDict(spaces.Dict({"x": spaces.Box(-3, 3, (4,), np.float32), ACTION_MASK: spaces.MultiBinary(N)}))


def _random_obs(space: FlatDict, rng: np.random.Generator, batch: int) -> np.ndarray:
    mask = rng.random((batch, N)) < rng.uniform(0.1, 0.9)
    mask[np.arange(batch), rng.integers(N, size=batch)] = True  # at least one legal action per row
    return space.flatten({"x": rng.normal(size=(batch, 4)).astype(np.float32), ACTION_MASK: mask.astype(np.int8)})


def test_sampled_and_greedy_actions_are_always_legal_and_log_probs_are_the_masked_ones():
    space = _masked_space()
    policy = PPOPolicy(PPOParams(hidden_sizes=[16], ortho_init=False), observation_space=space,
                       action_space=spaces.Discrete(N), seed=3)
    with torch.no_grad():  # large logits, so that an unmasked policy would pick illegal actions often
        policy.net.pi_head.weight.mul_(300.0)
    rng = np.random.default_rng(0)
    for _ in range(200):
        obs = _random_obs(space, rng, 16)
        legal = obs[:, space.columns(ACTION_MASK)] > 0.5
        for deterministic in (False, True):
            out = policy.act(obs, deterministic=deterministic)
            assert legal[np.arange(16), out.actions].all()
        exported = policy.export_module()(torch.as_tensor(obs)).numpy()
        assert legal[np.arange(16), exported].all()
        # act's log-probs are those learn recomputes from the stored observations (the masked distribution)
        out = policy.act(obs)
        logp, entropy_fn, _ = policy._evaluate(torch.as_tensor(obs), torch.as_tensor(out.actions))
        assert np.allclose(logp.detach().numpy(), out.extras["log_prob"], atol=1e-4)
        assert np.isfinite(entropy_fn().item())
    only = _random_obs(space, rng, 1)
    only[:, space.columns(ACTION_MASK)] = 0
    only[0, space.columns(ACTION_MASK).start + 2] = 1
    assert policy._evaluate(torch.as_tensor(only), torch.tensor([2]))[0].item() == pytest.approx(0.0, abs=1e-6)


def test_mask_errors_are_clear():
    with pytest.raises(UnsupportedSpaceError, match=r"masking .* is for Discrete actions"):
        PPOPolicy(PPOParams(), observation_space=_masked_space(), action_space=spaces.Box(-1, 1, (2,)))
    with pytest.raises(UnsupportedSpaceError, match=r"one entry per action .* has 6 entries"):
        PPOPolicy(PPOParams(), observation_space=_masked_space(), action_space=spaces.Discrete(N + 1))
    policy = PPOPolicy(PPOParams(), observation_space=_masked_space(), action_space=spaces.Discrete(N))
    obs = _random_obs(_masked_space(), np.random.default_rng(0), 2)
    obs[:, _masked_space().columns(ACTION_MASK)] = 0
    with pytest.raises(ValueError, match="allows no action"):
        policy.act(obs)


def test_image_keys_get_the_cnn():
    from rlightning_core.policy.encoders import NatureCNN

    space = FlatDict(spaces.Dict({"v": spaces.Box(-1, 1, (2,)), "img": spaces.Box(0, 255, (1, 36, 36), np.uint8)}))
    policy = PPOPolicy(PPOParams(cnn_features=32), observation_space=space, action_space=spaces.Discrete(3))
    assert isinstance(policy.net.encoders["img"], NatureCNN)
    space.seed(0)
    obs = np.stack([space.sample() for _ in range(4)])
    assert policy.act(obs).actions.shape == (4,)


def _train(tmp_path: Path, config: Path, *overrides: str) -> tuple[object, list[dict]]:
    from rlightning_core import load_config
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

    cfg = load_config(config, ["logging.progress=false", *overrides])
    engine = build_engine(cfg, build_env_group(cfg.env, seed=cfg.seed),
                          build_policy_group(cfg.policy.type, cfg.policy, cfg.cluster),
                          build_data_buffer(cfg.buffer.type, cfg.buffer))
    result = engine.run(tmp_path / "run")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    return result, rows


def test_ppo_learns_the_masked_env_without_ever_taking_an_illegal_action(tmp_path):
    result, rows = _train(tmp_path, ROOT / "examples" / "masked_ppo.yaml", "engine.eval_every=16",
                          "engine.eval_episodes=8")
    key = "env/rlightning_core.testing.dict_envs:MaskedChoice-v0/"
    illegal = [r[key + "illegal_action"] for r in rows if key + "illegal_action" in r]
    assert len(illegal) >= 40 and max(illegal) == 0.0
    returns = [r[key + "episode_return_mean"] for r in rows if key + "episode_return_mean" in r]
    assert returns[0] < 5.0 and max(returns[-5:]) > 6.0  # random legal play earns ~4.1 of 10
    assert result.last_eval_return >= 9.5


def test_ppo_learns_the_dict_env(tmp_path):
    result, _ = _train(tmp_path, ROOT / "examples" / "masked_ppo.yaml",
                       "env.params.id=rlightning_core.testing.dict_envs:DictCue-v0", "engine.total_steps=8192",
                       "engine.eval_every=16", "engine.eval_episodes=8")
    assert result.last_eval_return >= 7.5  # of 8; a policy reading one key only gets ~4, random play ~2


_MASKS = st.lists(st.lists(st.booleans(), min_size=N, max_size=N).filter(any), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(masks=_MASKS, scale=st.floats(0.01, 1000.0), seed=st.integers(0, 2**16),
       x=st.floats(-3.0, 3.0, allow_nan=False, width=32))
def test_property_every_sampled_greedy_and_exported_action_is_legal(masks, scale, seed, x):
    """For any masks with at least one legal action, any logit scale and any weights: no illegal action."""
    space = _masked_space()
    policy = PPOPolicy(PPOParams(hidden_sizes=[8], ortho_init=False), observation_space=space,
                       action_space=spaces.Discrete(N), seed=seed)
    with torch.no_grad():
        policy.net.pi_head.weight.mul_(scale)
    mask = np.asarray(masks, dtype=np.int8)
    batch = len(mask)
    values = np.full((batch, 4), x, np.float32) + np.linspace(-1, 1, 4 * batch, dtype=np.float32).reshape(batch, 4)
    obs = space.flatten({"x": values, ACTION_MASK: mask})
    rows = np.arange(batch)
    for deterministic in (False, True):
        assert mask[rows, policy.act(obs, deterministic=deterministic).actions].all()
    assert mask[rows, policy.export_module()(torch.as_tensor(obs)).numpy()].all()
