"""The ``rlightning-wandb`` plugin: registers the ``wandb`` logger.

Nothing heavy is imported here, so ``rlightning list-plugins`` stays fast: wandb loads when a run first builds
the logger.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlightning_core import hookimpl
from rlightning_core.types import RegisterFn
from rlightning_wandb.params import WandbParams

RLIGHTNING_PLUGIN_API = ">=2,<3"


def make_wandb_logger(params: WandbParams, *, run_dir: str | Path) -> Any:
    """Log every metric (and training videos) of the run to a W&B run stored under ``RUN_DIR/wandb``."""
    from rlightning_wandb.logger import WandbLogger

    return WandbLogger(params, run_dir=run_dir)


@hookimpl
def register_loggers(register: RegisterFn) -> None:
    """The ``wandb`` logger."""
    register(
        "wandb",
        make_wandb_logger,
        config=WandbParams,
        description="Weights & Biases run (offline by default, RUN_DIR/wandb): metrics, config, videos.",
    )
