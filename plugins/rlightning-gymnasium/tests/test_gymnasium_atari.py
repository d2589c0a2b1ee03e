"""The ``atari`` preset on real ALE games: observations, frame skip, and what differs between training and eval.

Random actions from a fixed seed: Breakout loses a life within a few hundred steps, and Space Invaders pays
5 to 30 points per alien, so an unclipped reward above 1 comes quickly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from rlightning_gymnasium.params import GymnasiumParams
from rlightning_gymnasium.worker import GymnasiumWorker

from rlightning_core.config.schema import EnvConfig
from rlightning_core.errors import MissingDependencyError

pytest.importorskip("ale_py")
pytest.importorskip("cv2")

MAX_STEPS = 3000


def worker(env_id: str, role: str, **params: Any) -> GymnasiumWorker:
    return GymnasiumWorker(GymnasiumParams(id=env_id, preset="atari", role=role, **params), num_envs=1, seed=3)


def ale(w: GymnasiumWorker) -> Any:
    return w.vector_env.envs[0].unwrapped.ale


def play(w: GymnasiumWorker, until: Any) -> list[Any]:
    """Step with seeded random actions until ``until(batch)``; the batches stepped."""
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(MAX_STEPS):
        batch = w.step(rng.integers(0, w.action_space.n, size=1))
        batches.append(batch)
        if until(batch):
            return batches
    raise AssertionError(f"not reached within {MAX_STEPS} steps")


@pytest.mark.parametrize("env_id", ["ALE/Breakout-v5", "BreakoutNoFrameskip-v4"])
@pytest.mark.parametrize("role", ["train", "eval"])
def test_the_preset_stacks_four_84x84_uint8_frames_and_skips_four(env_id, role):
    with worker(env_id, role) as w:
        assert (w.observation_space.shape, w.observation_space.dtype) == ((4, 84, 84), np.uint8)
        obs = w.reset()
        assert (obs.shape, obs.dtype) == ((1, 4, 84, 84), np.uint8)
        before = ale(w).getEpisodeFrameNumber()
        batch = w.step(np.array([0]))
        assert ale(w).getEpisodeFrameNumber() - before == 4
        assert batch.obs.dtype == np.uint8
        assert np.array_equal(batch.obs[0, :3], obs[0, 1:])  # the stack shifts by one frame per step


def test_in_training_a_lost_life_ends_the_episode_but_not_the_game():
    with worker("ALE/Breakout-v5", "train") as w:
        w.reset()
        lives = ale(w).lives()
        batches = play(w, lambda b: b.terminated[0])
        assert ale(w).lives() == lives - 1 > 0  # one life lost, the game goes on
        assert batches[-1].episodes == []  # a life is not an episode: the game's stats come when it ends
        frames = ale(w).getEpisodeFrameNumber()
        assert frames > 4 * len(batches)  # the reset continued the same game
        batches += play(w, lambda b: bool(b.episodes))
        assert ale(w).getEpisodeFrameNumber() < frames  # the game over was a real reset
        (episode,) = batches[-1].episodes
        assert episode.length >= len(batches)  # the whole game: every life, plus the resets' FIRE steps
        assert sum(int(b.terminated[0]) for b in batches) == lives  # one episode end per life


def test_training_clips_rewards_but_reports_the_game_score():
    with worker("ALE/SpaceInvaders-v5", "train") as w:
        w.reset()
        batches = play(w, lambda b: bool(b.episodes))
        rewards = np.concatenate([b.reward for b in batches])
        assert set(np.unique(rewards).tolist()) <= {-1.0, 0.0, 1.0}
        assert rewards.max() == 1.0
        (episode,) = batches[-1].episodes
        assert episode.episode_return > rewards.sum()  # the unclipped score (aliens pay 5 to 30)


def test_in_evaluation_lives_do_not_end_episodes_and_rewards_are_unclipped():
    with worker("ALE/SpaceInvaders-v5", "eval") as w:
        w.reset()
        lives = ale(w).lives()
        batches = play(w, lambda b: bool(b.episodes))
        assert sum(int(b.terminated[0] | b.truncated[0]) for b in batches) == 1  # only the game over ends it
        assert lives > 1 and ale(w).lives() == lives  # all lives were played (the env reset after the last)
        rewards = np.concatenate([b.reward for b in batches])
        assert rewards.max() > 1.0
        (episode,) = batches[-1].episodes
        assert episode.episode_return == pytest.approx(rewards.sum())
        assert episode.length >= len(batches)


def test_evaluation_builds_the_eval_role():
    params = GymnasiumParams(id="ALE/Breakout-v5", preset="atari")
    assert params.training
    cfg = EnvConfig(type="gymnasium", params=params, num_envs=2)
    evaluated = params.eval_env_config(cfg)
    assert (evaluated.params.role, evaluated.params.training, evaluated.num_envs) == ("eval", False, 2)


def test_the_evaluator_reports_the_unclipped_game_score():
    """Evaluation (``Evaluator``, which ``train`` and ``eval`` use) sees the eval role's whole games."""
    from rlightning_core.engine.evaluation import Evaluator

    class Fire:
        def act(self, obs: Any, deterministic: bool = False) -> Any:
            from types import SimpleNamespace

            return SimpleNamespace(actions=np.ones(len(obs), dtype=np.int64), env_actions=None)

    cfg = EnvConfig(type="gymnasium", params=GymnasiumParams(id="ALE/SpaceInvaders-v5", preset="atari"))
    ev = Evaluator([cfg], Fire(), episodes=1, seed=0)  # type: ignore[arg-type]
    try:
        (w,) = ev.group.workers
        assert w.params.role == "eval"
        metrics = ev.evaluate()
    finally:
        ev.close()
    assert metrics["eval/episode_return_mean"] > 1.0
    assert metrics["eval/episode_return_mean"] % 5 == 0  # Space Invaders scores in multiples of 5


def test_max_episode_steps_counts_agent_steps():
    with worker("ALE/Breakout-v5", "eval", max_episode_steps=10) as w:
        w.reset()
        batches = play(w, lambda b: bool(b.truncated[0]))
        assert len(batches) == 10 - 1  # the reset's FIRE step is the first of the ten
        assert batches[-1].episodes[0].length == 10


def test_the_preset_refuses_other_envs_and_a_frameskip():
    with pytest.raises(ValueError, match="preset 'atari' needs an Atari env id"):
        GymnasiumParams(id="CartPole-v1", preset="atari")
    with pytest.raises(ValueError, match="'frameskip' cannot be set with preset 'atari'"):
        GymnasiumParams(id="ALE/Breakout-v5", preset="atari", kwargs={"frameskip": 4})
    with pytest.raises(ValueError, match="must be one of"):
        GymnasiumParams(id="ALE/Breakout-v5", preset="atary")


def test_without_ale_py_an_atari_id_names_the_extra(monkeypatch):
    import sys

    import gymnasium

    for mod in [m for m in sys.modules if m == "ale_py" or m.startswith("ale_py.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "ale_py", None)
    for name in [k for k in gymnasium.registry if k.startswith("ALE/") or "NoFrameskip" in k]:
        monkeypatch.delitem(gymnasium.registry, name)
    for kwargs in ({"id": "BreakoutNoFrameskip-v4"}, {"id": "Breakout-v4", "preset": "atari"}):
        with pytest.raises(MissingDependencyError) as info:
            GymnasiumParams(**kwargs)
        assert (info.value.module, info.value.requirement) == ("ale_py", "rlightning-gymnasium[atari]")


def test_chunks_keep_the_uint8_frames():
    """The env side stores what the env returns: a chunk of Atari frames is uint8, 4x smaller than float32."""
    from rlightning_core.env.runner import EnvRunner
    from rlightning_core.policy.base import PolicyRole
    from rlightning_core.testing.doubles import TinyPolicy, TinyPolicyParams

    with GymnasiumWorker(GymnasiumParams(id="ALE/Breakout-v5", preset="atari"), num_envs=2, seed=0) as w:
        policy = TinyPolicy(TinyPolicyParams(), observation_space=w.observation_space, action_space=w.action_space,
                            role=PolicyRole.ROLLOUT)
        runner = EnvRunner(w, policy, needs_next_obs=True)
        chunk, stats = runner.collect(8)
    for key in ("obs", "next_obs"):
        assert (chunk.data[key].shape, chunk.data[key].dtype) == ((8, 2, 4, 84, 84), np.uint8)
    assert chunk.last_obs.dtype == np.uint8 and stats.steps == 16


def test_async_workers_register_the_ale_ids_in_their_subprocesses():
    """A spawned subprocess starts with Gymnasium's own registry; making the env registers ale_py's ids there."""
    params = GymnasiumParams(id="ALE/Breakout-v5", preset="atari", vectorization="async", context="spawn")
    with GymnasiumWorker(params, num_envs=2, seed=0) as w:
        obs = w.reset()
        batch = w.step(np.zeros(2, dtype=np.int64))
    assert obs.dtype == batch.obs.dtype == np.uint8 and batch.obs.shape == (2, 4, 84, 84)


@pytest.mark.parametrize("example", ["breakout_ppo.yaml", "breakout_dqn.yaml"])
def test_the_breakout_examples_load_with_the_preset(example):
    from pathlib import Path

    from rlightning_core import load_config

    config = load_config(Path(__file__).resolve().parents[3] / "examples" / example)
    (env,) = config.env
    assert (env.params.id, env.params.preset, env.params.role) == ("BreakoutNoFrameskip-v4", "atari", "train")
