"""MLflow logging for rlightning: the ``mlflow`` logger component.

Importing this package is cheap; mlflow is imported when a logger is created.
"""

from __future__ import annotations

from rlightning_mlflow.logger import MlflowLogger
from rlightning_mlflow.params import MlflowParams

__all__ = ["MlflowLogger", "MlflowParams"]
