"""The ``rlightning-mlflow`` plugin: registers the ``mlflow`` logger.

Nothing heavy is imported here, so ``rlightning list-plugins`` stays fast: mlflow loads when a run first builds
the logger.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlightning_core import hookimpl
from rlightning_core.types import RegisterFn
from rlightning_mlflow.params import MlflowParams

RLIGHTNING_PLUGIN_API = ">=2,<3"


def make_mlflow_logger(params: MlflowParams, *, run_dir: str | Path) -> Any:
    """Log every metric, the config and training videos of the run to an MLflow run."""
    from rlightning_mlflow.logger import MlflowLogger

    return MlflowLogger(params, run_dir=run_dir)


@hookimpl
def register_loggers(register: RegisterFn) -> None:
    """The ``mlflow`` logger."""
    register(
        "mlflow",
        make_mlflow_logger,
        config=MlflowParams,
        description="MLflow run (SQLite store RUN_DIR/mlflow.db by default, or any tracking URI): "
                    "metrics, config params, videos.",
    )
