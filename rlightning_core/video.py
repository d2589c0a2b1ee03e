"""Episode videos: MP4 files of deterministic episodes, for ``rlightning eval --video`` and ``logging.video_every``.

Frames come from envs built with ``render_mode="rgb_array"`` (headless: no display needed) and are streamed
to ffmpeg through moviepy as they are rendered, so a long episode never sits in memory. moviepy (and the ffmpeg
binary its ``imageio-ffmpeg`` dependency ships) is needed only when a video is recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlightning_core.dependencies import require

__all__ = ["EpisodeVideoRecorder", "Mp4Writer", "read_mp4_frames", "require_moviepy", "video_fps"]

log = logging.getLogger("rlightning")


def require_moviepy(what: str) -> None:
    """Raise a :class:`~rlightning_core.errors.MissingDependencyError` naming ``what`` when moviepy is missing."""
    require("moviepy", pip="rlightning[video]", needed_by=what, note="moviepy writes the MP4 files")


def video_fps(worker: Any, default: int = 30) -> int:
    """The frame rate an env asks for (``metadata["render_fps"]`` of the worker or its ``vector_env``)."""
    meta = getattr(worker, "metadata", None) or getattr(getattr(worker, "vector_env", None), "metadata", None) or {}
    fps = meta.get("render_fps") or default
    return max(1, int(fps))


class Mp4Writer:
    """Streams RGB frames into an H.264 MP4 file (yuv420p, playable everywhere).

    The file is opened at the first frame (its size fixes the video size); frames of odd width or height are
    padded by one black pixel row/column, as yuv420p needs even sizes.

    Args:
        path: the MP4 file to write (parent directories are created).
        fps: frames per second.
    """

    def __init__(self, path: str | Path, fps: int) -> None:
        self.path = Path(path)
        self.fps = int(fps)
        self.frames = 0
        self._writer: Any = None
        self._size: tuple[int, int] | None = None

    def write(self, frame: Any) -> None:
        """Append one ``H x W x 3`` uint8 frame (``H x W x 4`` RGBA and float frames in ``[0, 1]`` accepted)."""
        image = _as_rgb(frame)
        h, w = image.shape[:2]
        if h % 2 or w % 2:
            image = np.pad(image, ((0, h % 2), (0, w % 2), (0, 0)))
        if self._writer is None:
            from moviepy.video.io.ffmpeg_writer import FFMPEG_VideoWriter

            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._size = (image.shape[1], image.shape[0])
            self._writer = FFMPEG_VideoWriter(str(self.path), self._size, self.fps, codec="libx264",
                                              preset="veryfast", pixel_format="yuv420p")
        elif (image.shape[1], image.shape[0]) != self._size:
            raise ValueError(f"{self.path}: frame size changed from {self._size} to {image.shape[1::-1]}")
        self._writer.write_frame(np.ascontiguousarray(image))
        self.frames += 1

    def close(self) -> Path | None:
        """Finish the file; returns its path, or ``None`` when no frame was written (no file exists then)."""
        if self._writer is None:
            return None
        self._writer.close()
        self._writer = None
        return self.path


def _as_rgb(frame: Any) -> np.ndarray:
    image = np.asarray(frame)
    if image.ndim == 2:
        image = np.repeat(image[:, :, None], 3, axis=2)
    if image.ndim != 3 or image.shape[2] not in (3, 4):
        raise ValueError(f"expected an H x W x 3 RGB frame from render(), got shape {image.shape}")
    if image.dtype != np.uint8:
        image = (np.clip(image, 0.0, 1.0) * 255).astype(np.uint8) if image.dtype.kind == "f" else \
            image.astype(np.uint8)
    return image[:, :, :3]


def read_mp4_frames(path: str | Path, max_frames: int | None = None) -> tuple[np.ndarray, float]:
    """Decode an MP4 into a ``T x H x W x 3`` uint8 array and its frame rate.

    With ``max_frames``, every k-th frame is kept so that at most ``max_frames`` remain (the returned rate is
    divided by k, so the clip keeps its duration). Uses moviepy's header parser and the ffmpeg binary moviepy
    runs (from ``imageio-ffmpeg``), decoding every frame in one subprocess call.
    """
    import subprocess

    import imageio_ffmpeg
    from moviepy.video.io.ffmpeg_reader import ffmpeg_parse_infos

    info = ffmpeg_parse_infos(str(path))
    width, height = info["video_size"]
    raw = subprocess.run([imageio_ffmpeg.get_ffmpeg_exe(), "-v", "error", "-i", str(path), "-f", "rawvideo",
                          "-pix_fmt", "rgb24", "-"], capture_output=True, check=True).stdout
    frames = np.frombuffer(raw, np.uint8).reshape(-1, height, width, 3)
    if not len(frames):
        raise ValueError(f"{path}: the video has no frames")
    stride = 1 if not max_frames or len(frames) <= max_frames else -(-len(frames) // max_frames)
    return frames[::stride], float(info["video_fps"]) / stride


class EpisodeVideoRecorder:
    """Records one deterministic episode per env config as an MP4, on env instances of its own.

    Used by the training engines for ``logging.video_every``: the training envs are not touched (a separate
    evaluation env per config, built with ``render_mode="rgb_array"``), the policy acts deterministically and
    observation preprocessors are applied without updating their statistics.

    Args:
        env_cfgs: the run's env configs.
        preprocessors: observation preprocessors (applied with ``update=False``).
        directory: where the files go (``RUN_DIR/videos``).
        seed: seed of the video envs' episodes (video ``k`` uses ``derive_seed(seed, 2, config, k)``).
        registry: the plugin registry the env types resolve against.
        preprocess_fn: the training envs' ``build_env_group(preprocess_fn=...)`` (one fn, or one per env config),
            applied to the video envs' observations too.
    """

    def __init__(self, env_cfgs: Sequence[Any], preprocessors: Sequence[Any], directory: str | Path, *,
                 seed: int, registry: Any = None, preprocess_fn: Any = None) -> None:
        from rlightning_core.engine.evaluation import Evaluator
        from rlightning_core.env.preprocess_fn import per_config

        require_moviepy("logging.video_every")
        self.directory = Path(directory)
        fns = per_config(preprocess_fn, len(env_cfgs))
        self.evaluators = [Evaluator([cfg], policy=None, preprocessors=preprocessors, episodes=1,  # type: ignore[arg-type]
                                     seed=seed, registry=registry, render_mode="rgb_array", preprocess_fn=fn)
                           for cfg, fn in zip(env_cfgs, fns, strict=True)]
        self.labels = [ev.group.labels[0] for ev in self.evaluators]

    def record(self, policy: Any, name: str) -> list[tuple[str, Path, int]]:
        """Run one episode per env config with ``policy``; returns ``(tag, path, fps)`` per video written.

        Files are ``<directory>/<name>.mp4`` for one env config, ``<name>-<label>.mp4`` for several; tags are
        ``video`` and ``video/<label>``.
        """
        out = []
        several = len(self.evaluators) > 1
        for evaluator, label in zip(self.evaluators, self.labels, strict=True):
            fps = video_fps(evaluator.group.workers[0])
            writer = Mp4Writer(self.directory / (f"{name}-{label}.mp4" if several else f"{name}.mp4"), fps)
            evaluator.policy = policy
            evaluator.frame_sink = lambda _env, frame, w=writer: w.write(frame)
            try:
                evaluator.evaluate()
            finally:
                evaluator.frame_sink = None
                path = writer.close()
            if path is None:
                log.warning("env %s rendered no frames (render_mode='rgb_array' unsupported?): no video", label)
                continue
            out.append((f"video/{label}" if several else "video", path, fps))
        return out

    def close(self) -> None:
        """Release the video envs."""
        for evaluator in self.evaluators:
            evaluator.close()


def iter_env_frames(step_frames: Any) -> Iterator[tuple[int, Any]]:
    """``(env_index, frame)`` for what a vector env's ``render()`` returned (one frame per env)."""
    if step_frames is None:
        return
    if isinstance(step_frames, np.ndarray) and step_frames.ndim == 3:  # a single env's frame
        yield 0, step_frames
        return
    yield from enumerate(step_frames)
