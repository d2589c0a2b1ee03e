"""The TensorBoard logger: each metric of a logging step becomes one scalar event at that step.

Events are written with torch's public :class:`torch.utils.tensorboard.SummaryWriter` (tensorboard's own
writer classes are internal or marked experimental); torch is imported when the logger is created.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlightning_core.logging.numeric import NumericMetrics
from rlightning_tensorboard.params import TensorBoardParams

__all__ = ["TensorBoardLogger"]

log = logging.getLogger("rlightning")


class TensorBoardLogger:
    """Writes metrics as TensorBoard scalars into ``RUN_DIR/<params.subdir>``.

    Value policy:

    - every value that is a real number (``int``, ``float``, ``bool``, numpy scalars, 0-d tensors) is written
      as ``float(value)`` with the tag unchanged (``loss/policy`` shows as chart ``policy`` in section
      ``loss``);
    - non-finite values (NaN, +-inf) are written as they are: TensorBoard stores and shows them, and hiding
      a diverging loss would mislead (the JSONL log, which cannot hold NaN, writes ``null`` instead);
    - other values (strings, lists, ...) are not scalars: they are skipped, with one warning per metric name.

    Args:
        params: the logger's options.
        run_dir: the run directory; the event directory is created inside it.
    """

    def __init__(self, params: TensorBoardParams, *, run_dir: str | Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.params = params
        self.log_dir = Path(run_dir) / params.subdir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._writer: Any = SummaryWriter(log_dir=str(self.log_dir), flush_secs=params.flush_secs)
        self._numeric = NumericMetrics("tensorboard logger")
        self._closed = False

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Add one scalar per numeric metric at ``step`` (environment steps so far)."""
        if self._closed:
            raise RuntimeError(f"TensorBoardLogger for {self.log_dir} is closed; create a new one to log")
        step = int(step)
        for tag, number in self._numeric(metrics).items():
            self._writer.add_scalar(tag, number, global_step=step)

    def log_video(self, step: int, path: str | Path, *, tag: str = "video", fps: int = 30) -> None:
        """Add the MP4 at ``path`` as an animated image at ``step`` (what ``SummaryWriter.add_video`` writes).

        TensorBoard shows videos as animated GIFs in its Images tab. The clip is decoded (imageio-ffmpeg), thinned
        to at most ``params.video_max_frames`` frames (every k-th frame, played k times slower, so it keeps its
        duration) and encoded with Pillow. ``add_video`` itself is not used: torch's encoder imports
        ``moviepy.editor``, which moviepy 2 removed.
        """
        from tensorboard.compat.proto.summary_pb2 import Summary

        from rlightning_core.video import read_mp4_frames

        if self._closed:
            raise RuntimeError(f"TensorBoardLogger for {self.log_dir} is closed; create a new one to log")
        frames, rate = read_mp4_frames(path, max_frames=self.params.video_max_frames)
        image = Summary.Image(height=frames.shape[1], width=frames.shape[2], colorspace=3,
                              encoded_image_string=_gif(frames, rate))
        self._writer.file_writer.add_summary(Summary(value=[Summary.Value(tag=tag, image=image)]), int(step))

    def flush(self) -> None:
        """Write pending events to disk now."""
        if not self._closed:
            self._writer.flush()

    def close(self) -> None:
        """Flush pending events and close the event file; closing twice is harmless."""
        if not self._closed:
            self._closed = True
            self._writer.close()


def _gif(frames: Any, fps: float) -> bytes:
    """An animated, looping GIF of ``T x H x W x 3`` uint8 frames at ``fps``.

    One 256-colour palette, taken from the first, middle and last frames, serves every frame (no dithering):
    renders of RL envs use few colours, and per-frame palettes cost several times more to compute.
    """
    import io

    import numpy as np
    from PIL import Image

    sample = np.concatenate([frames[0], frames[len(frames) // 2], frames[-1]], axis=0)
    palette = Image.fromarray(sample).quantize(colors=256, method=Image.Quantize.FASTOCTREE)
    images = [Image.fromarray(f).quantize(palette=palette, dither=Image.Dither.NONE) for f in frames]
    buffer = io.BytesIO()
    images[0].save(buffer, format="GIF", save_all=True, append_images=images[1:],
                   duration=max(20, round(1000 / fps)), loop=0)
    return buffer.getvalue()

