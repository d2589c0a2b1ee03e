"""Options of the ``tensorboard`` logger (a light module: no torch, no tensorboard)."""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from attrs import define, field

from rlightning_core.config.validators import gt
from rlightning_core.dependencies import require

__all__ = ["TensorBoardParams"]


def _relative_subdir(_inst: Any, _attr: Any, value: Any) -> None:
    """The event directory must stay inside the run directory (only the driver writes there)."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a non-empty relative path inside the run directory, got {value!r}")
    path = PurePath(value)
    if path.is_absolute() or ".." in path.parts:
        raise ValueError(
            f"must be a relative path inside the run directory (no leading '/' and no '..'), got {value!r}"
        )


@define(frozen=True, kw_only=True)
class TensorBoardParams:
    """Options of the ``tensorboard`` logger (``logging.loggers[].params``)."""

    subdir: str = field(default="tensorboard", validator=_relative_subdir)
    """Directory for the event files, relative to the run directory; point ``tensorboard --logdir`` at it
    (or at a folder of run directories to compare runs)."""
    flush_secs: float = field(default=10.0, validator=gt(0))
    """Seconds between background flushes of pending events to disk; ``close()`` always flushes."""
    video_max_frames: int = field(default=100, validator=gt(0))
    """Training videos (``logging.video_every``) are shown as animated GIFs of at most this many frames
    (every k-th frame of the MP4); the MP4 in ``RUN_DIR/videos`` keeps every frame."""

    def __attrs_post_init__(self) -> None:
        # Requirements of this plugin, so missing only from a partial install (``pip install --no-deps``):
        # refused when the config is read, with the command that completes the install.
        require("tensorboard", pip="tensorboard>=2.10", needed_by="logger 'tensorboard'")
