"""Watch a trained policy: ``rlightning enjoy RUN_DIR`` plays episodes on screen or into one MP4 file.

The policy comes from :func:`~rlightning_core.predict.load_policy` (its saved observation preprocessors
applied with frozen statistics), and acts on one env of the run's first env config, built with
``render_mode="human"`` when a display exists, else ``"rgb_array"`` with every frame streamed into an MP4.

Seeding: episode ``i`` resets the env with ``seed + i`` (``seed`` defaults to the run's), so an episode is
the one ``gymnasium.make(id).reset(seed=seed + i)`` followed by ``predict`` would give. ``stochastic``
samples actions instead of taking the policy's mode; torch's generator is seeded with ``seed`` first, so a
stochastic replay repeats too. Returns are the env's own (no reward preprocessing).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from rlightning_core.errors import UserError
from rlightning_core.video import Mp4Writer, require_moviepy, video_fps

__all__ = ["EnjoyResult", "enjoy", "has_display"]


@attrs.define
class EnjoyResult:
    """What :func:`enjoy` played."""

    checkpoint: Path
    returns: list[float]
    lengths: list[int]
    render_mode: str
    video: Path | None = None
    """The MP4 written (``None`` in human mode)."""
    frames: int = 0
    """Frames written into ``video``: one per step, the state the policy acted on."""


def has_display() -> bool:
    """Whether a window can be opened: an X11/Wayland display is set, or the platform always has one."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def default_video_path(checkpoint: Path) -> Path:
    """``RUN_DIR/videos/enjoy.mp4`` for a checkpoint ``RUN_DIR/checkpoints/<file>``."""
    run_dir = checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent
    return run_dir / "videos" / "enjoy.mp4"


def enjoy(path: str | Path, *, episodes: int = 1, video: str | Path | None = None, best: bool = False,
          seed: int | None = None, deterministic: bool = True, render: str = "auto",
          on_episode: Callable[[int, float, int], None] | None = None) -> EnjoyResult:
    """Play ``episodes`` episodes of the policy saved at ``path`` (see the module docstring).

    Args:
        path: a run directory, its ``checkpoints`` directory, or one checkpoint file.
        episodes: episodes to play, one after the other.
        video: the MP4 to write; given, no window opens. Default in MP4 mode: ``RUN_DIR/videos/enjoy.mp4``.
        best: the checkpoint recorded as best by evaluation instead of the newest.
        seed: episode ``i`` resets with ``seed + i`` (default: the run's seed).
        deterministic: the policy's mode; ``False`` samples.
        render: ``"auto"`` (a window if :func:`has_display` and no ``video``), ``"human"`` or ``"mp4"``.
        on_episode: called as ``on_episode(index, return, length)`` when an episode ends.

    Raises:
        UserError: nothing loadable at ``path``; ``episodes < 1``; an unknown ``render``.
        MissingDependencyError: an MP4 is to be written and moviepy is not installed.
    """
    from rlightning_core.env.group import build_env_group
    from rlightning_core.plugins import get_plugins
    from rlightning_core.predict import load_policy

    if episodes < 1:
        raise UserError(f"enjoy: episodes must be at least 1, got {episodes}")
    if render not in ("auto", "human", "mp4"):
        raise UserError(f"enjoy: render must be 'auto', 'human' or 'mp4', got {render!r}")
    mp4 = video is not None or render == "mp4" or (render == "auto" and not has_display())
    if mp4:
        require_moviepy("rlightning enjoy (writing an MP4; no display found, or --video given)")
    loaded = load_policy(path, best=best)
    config = loaded.config
    base_seed = config.seed if seed is None else seed
    render_mode = "rgb_array" if mp4 else "human"
    env_cfg = attrs.evolve(config.env[0], num_workers=1, num_envs=1)
    group = build_env_group([env_cfg], seed=base_seed, registry=get_plugins().registry, render_mode=render_mode)
    worker = group.workers[0]
    writer = Mp4Writer(Path(video) if video is not None else default_video_path(loaded.checkpoint),
                       video_fps(worker)) if mp4 else None
    if not deterministic:
        import torch

        torch.manual_seed(base_seed)
    returns: list[float] = []
    lengths: list[int] = []
    try:
        for i in range(episodes):
            ret, length = _play(loaded, worker, base_seed + i, deterministic, writer)
            returns.append(ret)
            lengths.append(length)
            if on_episode is not None:
                on_episode(i, ret, length)
    finally:
        written = writer.close() if writer is not None else None
        group.close()
    if writer is not None and written is None:
        raise UserError(f"enjoy: env {env_cfg.type!r} rendered no frames with render_mode='rgb_array'; "
                        "no video written")
    return EnjoyResult(checkpoint=loaded.checkpoint, returns=returns, lengths=lengths,
                       render_mode=render_mode, video=written, frames=writer.frames if writer else 0)


def _play(loaded: Any, worker: Any, seed: int, deterministic: bool, writer: Mp4Writer | None
          ) -> tuple[float, int]:
    """One episode from ``reset(seed=seed)``; a frame before every action goes to ``writer``."""
    from rlightning_core.video import iter_env_frames

    obs = worker.reset(seed=seed)
    state = None
    while True:
        if writer is not None:  # the worker autoresets: the frame after the last step is the next episode's
            for _, frame in iter_env_frames(worker.render()):
                writer.write(frame)
        actions, state = loaded.predict(obs, state=state, deterministic=deterministic)
        step = worker.step(actions)
        if step.episodes:
            episode = step.episodes[0]
            return float(episode.episode_return), int(episode.length)
        obs = step.obs
