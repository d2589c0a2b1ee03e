"""DQN with action masking: greedy and epsilon-random actions are legal; the target max is over legal actions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st
from rlightning_dqn.params import DQNParams
from rlightning_dqn.policy import DQNPolicy

import rlightning_core.testing.dict_envs  # noqa: F401  (registers the ids)
from rlightning_core.spaces import ACTION_MASK, FlatDict

ROOT = Path(__file__).resolve().parents[3]
N = 5


def _space() -> FlatDict:
    return FlatDict(spaces.Dict({"x": spaces.Box(-3, 3, (3,), np.float32), ACTION_MASK: spaces.MultiBinary(N)}))


def _random_obs(rng: np.random.Generator, batch: int) -> np.ndarray:
    mask = rng.random((batch, N)) < rng.uniform(0.1, 0.9)
    mask[np.arange(batch), rng.integers(N, size=batch)] = True
    return _space().flatten({"x": rng.normal(size=(batch, 3)).astype(np.float32), ACTION_MASK: mask.astype(np.int8)})


@pytest.mark.parametrize("epsilon", [0.0, 0.5, 1.0])
def test_greedy_and_random_actions_are_always_legal(epsilon):
    policy = DQNPolicy(DQNParams(hidden_sizes=[16], exploration_initial_eps=epsilon), observation_space=_space(),
                       action_space=spaces.Discrete(N), seed=1)
    rng = np.random.default_rng(0)
    seen = np.zeros(N, bool)
    cols = _space().columns(ACTION_MASK)
    for _ in range(200):
        obs = _random_obs(rng, 8)
        legal = obs[:, cols] > 0.5
        for deterministic in (False, True):
            actions = policy.act(obs, deterministic=deterministic).actions
            assert legal[np.arange(8), actions].all()
            seen[actions] = True
        assert legal[np.arange(8), policy.export_module()(torch.as_tensor(obs)).numpy()].all()
    if epsilon == 1.0:
        assert seen.all()  # the random actions cover every action that is legal somewhere


def test_target_max_is_over_legal_next_actions():
    """With one legal next action, the target bootstraps from that action's value, not the max over all."""
    policy = DQNPolicy(DQNParams(hidden_sizes=[8], double_dqn=False, batch_size=1, learning_starts=0, lr=1e-9),
                       observation_space=_space(), action_space=spaces.Discrete(N), seed=0)
    rng = np.random.default_rng(1)
    obs, nxt = _random_obs(rng, 1), _random_obs(rng, 1)
    q_next = policy.q_target(torch.as_tensor(nxt))[0]
    only = int(q_next.argmin())  # the worst action is the only legal one
    nxt[0, _space().columns(ACTION_MASK)] = 0
    nxt[0, _space().columns(ACTION_MASK).start + only] = 1
    q_next = policy.q_target(torch.as_tensor(nxt))[0]

    class OneSample:
        def sample(self, batch_size, generator=None):
            return {"obs": torch.as_tensor(obs), "next_obs": torch.as_tensor(nxt), "actions": torch.tensor([0]),
                    "rewards": torch.tensor([0.0]), "discount": torch.tensor([1.0]),
                    "terminated": torch.tensor([0.0]), "weights": torch.tensor([1.0])}

    stats = policy._update(OneSample(), prioritized=False)
    q = policy.q(torch.as_tensor(obs))[0, 0].item()
    td = stats[2].item()
    assert td == pytest.approx(abs(q - q_next[only].item()), abs=1e-4)
    assert td != pytest.approx(abs(q - q_next.max().item()), abs=1e-4)


def test_dqn_never_takes_an_illegal_action_while_training(tmp_path):
    from rlightning_core import load_config
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

    cfg = load_config(ROOT / "examples" / "masked_ppo.yaml", [
        "logging.progress=false", "policy.type=dqn", "policy.params={}", "buffer.type=replay",
        "engine.type=async", "engine.params={}", "engine.total_steps=1500"])
    engine = build_engine(cfg, build_env_group(cfg.env, seed=cfg.seed),
                          build_policy_group(cfg.policy.type, cfg.policy, cfg.cluster),
                          build_data_buffer(cfg.buffer.type, cfg.buffer))
    engine.run(tmp_path / "run")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    illegal = [v for r in rows for k, v in r.items() if k.endswith("/illegal_action")]
    assert illegal and max(illegal) == 0.0


@settings(max_examples=60, deadline=None)
@given(masks=st.lists(st.lists(st.booleans(), min_size=N, max_size=N).filter(any), min_size=1, max_size=8),
       epsilon=st.floats(0.0, 1.0), seed=st.integers(0, 2**16), x=st.floats(-3.0, 3.0, width=32))
def test_property_every_greedy_random_and_exported_action_is_legal(masks, epsilon, seed, x):
    """For any masks with at least one legal action, any epsilon and any weights: no illegal action."""
    policy = DQNPolicy(DQNParams(hidden_sizes=[8], exploration_initial_eps=epsilon), observation_space=_space(),
                       action_space=spaces.Discrete(N), seed=seed)
    mask = np.asarray(masks, dtype=np.int8)
    batch = len(mask)
    values = np.full((batch, 3), x, np.float32) + np.linspace(-1, 1, 3 * batch, dtype=np.float32).reshape(batch, 3)
    obs = _space().flatten({"x": values, ACTION_MASK: mask})
    rows = np.arange(batch)
    for deterministic in (False, True):
        assert mask[rows, policy.act(obs, deterministic=deterministic).actions].all()
    assert mask[rows, policy.export_module()(torch.as_tensor(obs)).numpy()].all()
