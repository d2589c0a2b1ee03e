"""The ``atari`` preset: the standard preprocessing of Atari 2600 games, as training and evaluation want it.

Each single env is built as (innermost first):

1. ``gymnasium.make(id, frameskip=1, ...)``: the emulator steps one frame per call, so the skipping below is
   the only one (``ALE/*-v5`` ids keep their registered sticky actions, ``repeat_action_probability=0.25``;
   ``*NoFrameskip-v4`` ids have none);
2. ``AtariPreprocessing``: up to 30 no-ops on reset, the action repeated for 4 frames with the max over the
   last two (flicker), 84x84 grayscale ``uint8``;
3. ``TimeLimit(max_episode_steps)`` when ``params.max_episode_steps`` is set: it counts agent steps here, not
   emulator frames (the game itself stops after 108,000 frames);
4. ``RecordEpisodeStatistics``: the game's own score and length, before the training-only changes below; the
   worker reports these as the episodes (``rollout/episode_return``, ``eval/episode_return_mean``), so both
   are whole games and unclipped scores;
5. training only, :class:`EpisodicLife`: losing a life ends the episode (``terminated``), and the next reset
   continues the same game; a real reset happens only when the game is over;
6. :class:`FireReset` for games that wait for FIRE (``Breakout``): FIRE after every reset; in evaluation,
   where a lost life does not end the episode, also FIRE after a lost life;
7. training only, ``ClipReward(-1, 1)``: the rewards learned from are -1, 0 or 1;
8. ``FrameStackObservation(4)``: observations are ``uint8`` of shape ``(4, 84, 84)`` (channels first).

The wrappers of ``params.wrappers`` come after all of these.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium
from gymnasium.wrappers import (
    AtariPreprocessing,
    ClipReward,
    FrameStackObservation,
    RecordEpisodeStatistics,
    TimeLimit,
)

__all__ = ["FRAME_SKIP", "FRAME_STACK", "SCREEN_SIZE", "EpisodicLife", "FireReset", "wrap_atari"]

FRAME_SKIP = 4
FRAME_STACK = 4
SCREEN_SIZE = 84
NOOP_MAX = 30
_FIRE = 1
_NOOP = 0


def _lives(env: gymnasium.Env) -> int:
    return int(env.unwrapped.ale.lives())  # type: ignore[attr-defined]


class EpisodicLife(gymnasium.Wrapper):
    """Losing a life ends the episode; the next reset continues the game (a no-op step) until it is over.

    Training only (Mnih et al. 2015): it makes the cost of losing a life visible to the value function without
    replaying the start of the game after every life. A reset with a ``seed`` is always a real reset.
    """

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        self._lives = 0
        self._game_over = True

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the game; ``terminated`` also when a life was lost."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = terminated or truncated
        lives = _lives(self.env)
        if 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """A real reset when the game is over (or a seed is given), else a no-op step of the same game."""
        if self._game_over or seed is not None or options is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(_NOOP)
            if terminated or truncated:
                obs, info = self.env.reset()
        self._game_over = False
        self._lives = _lives(self.env)
        return obs, info


class FireReset(gymnasium.Wrapper):
    """Press FIRE after a reset (games such as Breakout wait for it), and after a lost life if ``after_life_loss``.

    Args:
        env: an ALE env whose action 1 is FIRE.
        after_life_loss: also FIRE when a life is lost mid-episode (evaluation, where :class:`EpisodicLife`
            does not turn the lost life into a reset).
    """

    def __init__(self, env: gymnasium.Env, after_life_loss: bool = False) -> None:
        super().__init__(env)
        self.after_life_loss = after_life_loss
        self._lives = 0

    @staticmethod
    def needed(env: gymnasium.Env) -> bool:
        """Whether the game has a FIRE action to start it (action 1, as ALE numbers the minimal set)."""
        meanings = env.unwrapped.get_action_meanings()  # type: ignore[attr-defined]
        return len(meanings) >= 3 and meanings[_FIRE] == "FIRE"

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """Reset, then FIRE (resetting again should FIRE end the game)."""
        self.env.reset(seed=seed, options=options)
        obs, _, terminated, truncated, info = self.env.step(_FIRE)
        if terminated or truncated:
            obs, info = self.env.reset()
        self._lives = _lives(self.env)
        return obs, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the game; FIRE right after a lost life when ``after_life_loss``."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = _lives(self.env)
        if self.after_life_loss and lives < self._lives and not (terminated or truncated):
            obs, extra, terminated, truncated, info = self.env.step(_FIRE)
            reward = float(reward) + float(extra)
        self._lives = lives
        return obs, reward, terminated, truncated, info


def wrap_atari(env: gymnasium.Env, *, training: bool, max_episode_steps: int | None = None) -> gymnasium.Env:
    """Apply the ``atari`` preset (see the module docstring) to ``env``, made with ``frameskip=1``.

    Args:
        env: an ALE env from ``gymnasium.make(id, frameskip=1)``.
        training: ``True`` for training envs (episodic life, clipped rewards), ``False`` for evaluation.
        max_episode_steps: truncate games after this many agent steps (``None``: the game's own limit).
    """
    env = AtariPreprocessing(env, noop_max=NOOP_MAX, frame_skip=FRAME_SKIP, screen_size=SCREEN_SIZE,
                             terminal_on_life_loss=False, grayscale_obs=True, scale_obs=False)
    if max_episode_steps is not None:
        env = TimeLimit(env, max_episode_steps=max_episode_steps)
    env = RecordEpisodeStatistics(env)
    if training:
        env = EpisodicLife(env)
    if FireReset.needed(env):
        env = FireReset(env, after_life_loss=not training)
    if training:
        env = ClipReward(env, min_reward=-1.0, max_reward=1.0)
    return FrameStackObservation(env, stack_size=FRAME_STACK)
