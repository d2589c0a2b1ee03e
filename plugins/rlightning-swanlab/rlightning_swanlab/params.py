"""Options of the ``swanlab`` logger (a light module: swanlab is not imported here)."""

from __future__ import annotations

from attrs import Factory, define, field

from rlightning_core.config.validators import one_of
from rlightning_core.dependencies import require

__all__ = ["SwanlabParams"]


@define(frozen=True, kw_only=True)
class SwanlabParams:
    """Options of the ``swanlab`` logger (``logging.loggers[].params``).

    SwanLab keeps the run under ``RUN_DIR/swanlog/run-<time>-<id>/``.
    """

    mode: str = field(default="offline", validator=one_of("offline", "online", "local", "disabled"))
    """``offline`` (the default: a run file in the run directory, nothing leaves the machine; upload later with
    ``swanlab sync``), ``online`` (needs ``swanlab login``), ``local`` (for the local dashboard
    ``swanlab watch``; needs ``pip install 'rlightning-swanlab[dashboard]'``), or ``disabled``."""
    project: str = "rlightning"
    """SwanLab project."""
    workspace: str | None = None
    """SwanLab workspace (user or organisation; ``null``: yours)."""
    name: str | None = None
    """Experiment name (``null``: the run directory's name)."""
    description: str | None = None
    """Free-text description."""
    tags: list[str] = Factory(list)
    """Experiment tags."""
    log_config: bool = True
    """Record the resolved rlightning config (``RUN_DIR/config.yaml``), flattened, as the experiment config."""
    console: bool = False
    """Let SwanLab capture the terminal output into the run (off by default)."""
    monitor: bool = True
    """Let SwanLab sample hardware use (CPU, memory, GPU) in the background."""

    def __attrs_post_init__(self) -> None:
        # Requirements of this plugin, so missing only from a partial install (``pip install --no-deps``):
        # refused when the config is read, with the command that completes the install.
        require("swanlab", pip="swanlab>=0.10", needed_by="logger 'swanlab'")
        if self.mode == "local":  # swanlab's local dashboard, an extra of swanlab
            require("swanboard", pip="rlightning-swanlab[dashboard]", needed_by="swanlab mode 'local'")
