"""The ``rlightning-tensorboard`` plugin: registers the ``tensorboard`` logger.

Nothing heavy is imported here, so ``rlightning list-plugins`` stays fast: torch and tensorboard load when a
run first builds the logger.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlightning_core import hookimpl
from rlightning_core.types import RegisterFn
from rlightning_tensorboard.params import TensorBoardParams

RLIGHTNING_PLUGIN_API = ">=2,<3"


def make_tensorboard_logger(params: TensorBoardParams, *, run_dir: str | Path) -> Any:
    """Write every metric as a TensorBoard scalar under ``RUN_DIR/<subdir>``."""
    from rlightning_tensorboard.logger import TensorBoardLogger

    return TensorBoardLogger(params, run_dir=run_dir)


@hookimpl
def register_loggers(register: RegisterFn) -> None:
    """The ``tensorboard`` logger."""
    register(
        "tensorboard",
        make_tensorboard_logger,
        config=TensorBoardParams,
        description="TensorBoard event files with every metric as a scalar (RUN_DIR/tensorboard).",
    )
