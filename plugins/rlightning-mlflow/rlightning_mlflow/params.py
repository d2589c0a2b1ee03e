"""Options of the ``mlflow`` logger (a light module: mlflow is not imported here)."""

from __future__ import annotations

from typing import Any

from attrs import Factory, define, field

from rlightning_core.dependencies import require

__all__ = ["MlflowParams"]


def _uri_or_none(_inst: Any, _attr: Any, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"must be a tracking URI such as 'sqlite:////abs/mlflow.db' or 'http://host:5000', "
                         f"or null for RUN_DIR/mlflow.db; got {value!r}")


def _non_empty(_inst: Any, _attr: Any, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a non-empty name, got {value!r}")


@define(frozen=True, kw_only=True)
class MlflowParams:
    """Options of the ``mlflow`` logger (``logging.loggers[].params``)."""

    tracking_uri: str | None = field(default=None, validator=_uri_or_none)
    """Where runs are recorded: ``null`` for a SQLite store in the run directory (``RUN_DIR/mlflow.db``,
    artifacts in ``RUN_DIR/mlflow-artifacts``), or any MLflow tracking URI: a shared
    ``sqlite:////abs/path/mlflow.db``, a server ``http://host:5000``, ``databricks`` ..."""
    experiment: str = field(default="rlightning", validator=_non_empty)
    """MLflow experiment name (created when missing)."""
    run_name: str | None = None
    """Run name (``null``: the run directory's name)."""
    tags: dict[str, str] = Factory(dict)
    """Extra run tags (the run directory is always tagged as ``rlightning.run_dir``)."""
    log_config: bool = True
    """Record the resolved config (``RUN_DIR/config.yaml``) as run params, one per leaf (``policy.params.lr``)."""
    log_videos: bool = True
    """Attach the MP4s of ``logging.video_every`` as run artifacts under ``videos/``."""

    def __attrs_post_init__(self) -> None:
        # Requirements of this plugin, so missing only from a partial install (``pip install --no-deps``):
        # refused when the config is read, with the command that completes the install.
        for module, pip in (("mlflow", "mlflow-skinny>=2.12"), ("sqlalchemy", "sqlalchemy>=1.4,<3"),
                            ("alembic", "alembic>=1.8,<2")):
            require(module, pip=pip, needed_by="logger 'mlflow'")
