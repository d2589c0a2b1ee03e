"""The ``rlightning-swanlab`` plugin: registers the ``swanlab`` logger.

Nothing heavy is imported here, so ``rlightning list-plugins`` stays fast: swanlab loads when a run first
builds the logger.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlightning_core import hookimpl
from rlightning_core.types import RegisterFn
from rlightning_swanlab.params import SwanlabParams

RLIGHTNING_PLUGIN_API = ">=2,<3"


def make_swanlab_logger(params: SwanlabParams, *, run_dir: str | Path) -> Any:
    """Log every metric of the run to a SwanLab experiment stored under ``RUN_DIR/swanlog``."""
    from rlightning_swanlab.logger import SwanlabLogger

    return SwanlabLogger(params, run_dir=run_dir)


@hookimpl
def register_loggers(register: RegisterFn) -> None:
    """The ``swanlab`` logger."""
    register(
        "swanlab",
        make_swanlab_logger,
        config=SwanlabParams,
        description="SwanLab experiment (offline by default, RUN_DIR/swanlog): metrics and config.",
    )
