"""``vectorization: envpool`` on real envpool envs, beside the Gymnasium path of the same params."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from rlightning_gymnasium.envpool_worker import EnvpoolWorker
from rlightning_gymnasium.params import GymnasiumParams
from rlightning_gymnasium.worker import GymnasiumWorker

pytest.importorskip("envpool", reason="vectorization: envpool needs `pip install envpool`")


def pool(env_id: str, **params: Any) -> EnvpoolWorker:
    return EnvpoolWorker(GymnasiumParams(id=env_id, vectorization="envpool", **params), num_envs=2, seed=5)


def run(w: Any, steps: int) -> tuple[list[np.ndarray], list[Any]]:
    """Seeded random actions for ``steps``; (rewards, episodes)."""
    rng = np.random.default_rng(0)
    rewards, episodes = [], []
    obs = w.reset()
    assert obs.shape[0] == 2
    for _ in range(steps):
        if hasattr(w.action_space, "n"):
            a = rng.integers(0, w.action_space.n, size=2)
        else:
            a = rng.uniform(-1, 1, size=(2, *w.action_space.shape)).astype(np.float32)
        b = w.step(a)
        rewards.append(b.reward)
        episodes += b.episodes
    return rewards, episodes


def test_hopper_obs_match_gymnasium_and_episodes_reported() -> None:
    pytest.importorskip("mujoco")
    ref = GymnasiumWorker(GymnasiumParams(id="Hopper-v5"), num_envs=2, seed=5)
    w = pool("Hopper-v5")
    assert w.reset().shape[1:] == ref.reset().shape[1:]
    assert w.reset().dtype == ref.reset().dtype
    _, episodes = run(w, 300)  # random Hopper falls within ~100 steps
    assert episodes and all(e.length > 0 for e in episodes)
    ref.close()
    w.close()


def test_breakout_preset_obs_and_clipping_by_role() -> None:
    pytest.importorskip("ale_py")
    ref = GymnasiumWorker(GymnasiumParams(id="ALE/Breakout-v5", preset="atari"), num_envs=1, seed=5)
    ref_obs = ref.reset()
    ref.close()
    train = pool("ALE/Breakout-v5", preset="atari")
    obs = train.reset()
    assert obs.shape[1:] == ref_obs.shape[1:] == (4, 84, 84) and obs.dtype == ref_obs.dtype == np.uint8
    rewards, _ = run(train, 400)
    assert set(np.concatenate(rewards).tolist()) <= {0.0, 1.0, -1.0}
    ev = pool("BreakoutNoFrameskip-v4", preset="atari", role="eval")
    _, eval_episodes = run(ev, 3000)
    assert eval_episodes, "a random Breakout game ends within 3000 agent steps"
    assert all(e.episode_return >= 0 and e.length > 0 for e in eval_episodes)


def test_same_seed_same_transitions() -> None:
    pytest.importorskip("mujoco")
    a, _ = run(pool("Hopper-v5"), 50)
    b, _ = run(pool("Hopper-v5"), 50)
    np.testing.assert_array_equal(np.stack(a), np.stack(b))


def test_unsupported_id_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="vectorization 'envpool'"):
        GymnasiumParams(id="CartPole-v1", vectorization="envpool")


def test_episode_boundaries_follow_same_step_reset() -> None:
    """Each reported length counts the steps since that env's previous episode ended: no lost step."""
    pytest.importorskip("mujoco")
    w = pool("Hopper-v5")
    w.reset()
    rng = np.random.default_rng(1)
    last_end = [0, 0]
    for t in range(1, 400):
        b = w.step(rng.uniform(-1, 1, size=(2, 3)).astype(np.float32))
        for e in b.episodes:
            assert e.length == t - last_end[e.env_index]
            assert b.final_obs is not None
            last_end[e.env_index] = t
    assert max(last_end) > 0
