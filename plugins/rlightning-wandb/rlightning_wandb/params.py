"""Options of the ``wandb`` logger (a light module: wandb is not imported here)."""

from __future__ import annotations

from attrs import Factory, define, field

from rlightning_core.config.validators import one_of
from rlightning_core.dependencies import require

__all__ = ["WandbParams"]


@define(frozen=True, kw_only=True)
class WandbParams:
    """Options of the ``wandb`` logger (``logging.loggers[].params``).

    The W&B run's files go to ``RUN_DIR/wandb/`` (wandb's own layout: ``offline-run-*`` or ``run-*``).
    """

    mode: str = field(default="offline", validator=one_of("offline", "online", "disabled"))
    """``offline`` (the default: nothing leaves the machine; upload later with ``wandb sync RUN_DIR/wandb/
    offline-run-*``), ``online`` (stream to the W&B server; needs ``wandb login`` or ``WANDB_API_KEY``), or
    ``disabled`` (wandb does nothing)."""
    project: str = "rlightning"
    """W&B project the run belongs to."""
    entity: str | None = None
    """W&B user or team (``null``: your default entity)."""
    name: str | None = None
    """Run name (``null``: the run directory's name)."""
    group: str | None = None
    """Run group, to gather e.g. the seeds of one experiment."""
    tags: list[str] = Factory(list)
    """Run tags."""
    notes: str | None = None
    """Free-text description of the run."""
    log_config: bool = True
    """Record the resolved rlightning config (``RUN_DIR/config.yaml``) as the W&B run config."""
    console: bool = False
    """Let wandb capture the terminal output into the run (off by default: rlightning's log stays as is)."""

    def __attrs_post_init__(self) -> None:
        # Requirements of this plugin, so missing only from a partial install (``pip install --no-deps``):
        # refused when the config is read, with the command that completes the install.
        require("wandb", pip="wandb>=0.19", needed_by="logger 'wandb'")
