"""The MLflow logger: each logging step becomes one value per metric at that step in an MLflow run.

It talks to the tracking store through :class:`mlflow.tracking.MlflowClient` only (never MLflow's fluent
``mlflow.start_run`` API and its process-global active run), so several rlightning runs, or MLflow runs of
your own, can live in one process.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlightning_core.logging.numeric import NumericMetrics
from rlightning_mlflow.params import MlflowParams

__all__ = ["MlflowLogger"]

log = logging.getLogger("rlightning")

#: MLflow's limits for one ``log_batch`` call and for one param value.
_MAX_METRICS, _MAX_PARAMS, _MAX_PARAM_VALUE = 1000, 100, 6000
#: Characters MLflow accepts in metric and param names; others become ``_``.
_BAD_NAME_CHARS = re.compile(r"[^\w\-. /:]")
#: Where the logger remembers its MLflow run, so ``train --resume`` continues it.
RUN_FILE = "mlflow-run.json"


class MlflowLogger:
    """Writes metrics, config params and training videos into one MLflow run.

    Value policy: real numbers are logged as floats; NaN is stored as NaN; MLflow's stores keep infinities as
    ``±1.797e308`` (the largest float); values that are not numbers are skipped with one warning per name.
    Metric names with characters MLflow refuses (anything but letters, digits, ``_-. /:``) are logged with
    those characters replaced by ``_``.

    Args:
        params: the logger's options.
        run_dir: the run directory (the default SQLite store and artifacts live in it).
    """

    def __init__(self, params: MlflowParams, *, run_dir: str | Path) -> None:
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        from rlightning_core.errors import UserError

        self.params = params
        self.run_dir = Path(run_dir).resolve()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.tracking_uri = params.tracking_uri or f"sqlite:///{self.run_dir / 'mlflow.db'}"
        try:
            self.client: Any = MlflowClient(tracking_uri=self.tracking_uri)
            self.run_id, resumed = self._open_run()
            if params.log_config:
                self._log_config(skip_existing=resumed)
        except MlflowException as exc:  # a bad URI, an unreachable server, refused credentials
            raise UserError(f"logger 'mlflow' could not open a run in {self.tracking_uri!r} "
                            f"(params.tracking_uri): {exc}") from exc
        self._numeric = NumericMetrics("mlflow logger")
        self._closed = False

    # -- setup -----------------------------------------------------------------------------------------------
    def _open_run(self) -> tuple[str, bool]:
        """Continue the run recorded in ``RUN_DIR/mlflow-run.json`` (a resumed training run) or start one."""
        from mlflow.exceptions import MlflowException

        record = self.run_dir / RUN_FILE
        if record.is_file():
            saved = json.loads(record.read_text(encoding="utf-8"))
            if saved.get("tracking_uri") == self.tracking_uri:
                try:
                    self.client.update_run(saved["run_id"], status="RUNNING")
                    return str(saved["run_id"]), True
                except MlflowException as exc:  # deleted from the store: start a new run
                    log.warning("mlflow logger: cannot continue run %s (%s); starting a new one",
                                saved.get("run_id"), exc)
        experiment = self.client.get_experiment_by_name(self.params.experiment)
        if experiment is None:
            experiment_id = self.client.create_experiment(self.params.experiment,
                                                          artifact_location=self._artifact_location())
        else:
            experiment_id = experiment.experiment_id
        tags = {"rlightning.run_dir": str(self.run_dir), **self.params.tags}
        run = self.client.create_run(experiment_id, run_name=self.params.run_name or self.run_dir.name,
                                     tags=tags)
        record.write_text(json.dumps({"tracking_uri": self.tracking_uri, "run_id": run.info.run_id}),
                          encoding="utf-8")
        return str(run.info.run_id), False

    def _artifact_location(self) -> str | None:
        """Where a new experiment keeps artifacts: ``<db folder>/mlflow-artifacts`` for a local SQLite store.

        Never MLflow's default ``./mlruns`` in whatever directory the run was started from; a server decides
        for itself (``None``).
        """
        if not self.tracking_uri.startswith("sqlite:///"):
            return None
        database = Path(self.tracking_uri.removeprefix("sqlite:///"))
        return (database.parent.resolve() / "mlflow-artifacts").as_uri()

    def _log_config(self, *, skip_existing: bool) -> None:
        from mlflow.entities import Param

        from rlightning_core.logging.runinfo import flat_run_config

        existing = set(self.client.get_run(self.run_id).data.params) if skip_existing else set()
        params = []
        for key, value in flat_run_config(self.run_dir).items():
            name = _param_name(key)
            if name not in existing:
                params.append(Param(name, "null" if value is None else str(value)[:_MAX_PARAM_VALUE]))
        for i in range(0, len(params), _MAX_PARAMS):
            self.client.log_batch(self.run_id, params=params[i: i + _MAX_PARAMS])

    # -- the logger contract ---------------------------------------------------------------------------------
    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Log one value per numeric metric at ``step`` (environment steps so far)."""
        from mlflow.entities import Metric

        self._check_open()
        now = int(time.time() * 1000)
        batch = [Metric(_BAD_NAME_CHARS.sub("_", key), number, now, int(step))
                 for key, number in self._numeric(metrics).items()]
        for i in range(0, len(batch), _MAX_METRICS):
            self.client.log_batch(self.run_id, metrics=batch[i: i + _MAX_METRICS])

    def log_video(self, step: int, path: str | Path, *, tag: str = "video", fps: int = 30) -> None:
        """Attach the MP4 at ``path`` as a run artifact under ``videos/`` (its name carries the iteration)."""
        del step, tag, fps
        self._check_open()
        if self.params.log_videos:
            self.client.log_artifact(self.run_id, str(path), artifact_path="videos")

    def close(self) -> None:
        """Mark the MLflow run finished; closing twice is harmless."""
        if not self._closed:
            self._closed = True
            self.client.set_terminated(self.run_id, status="FINISHED")

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"MlflowLogger for {self.run_dir} is closed; create a new one to log")


def _param_name(key: str) -> str:
    """``env[0].type`` -> ``env.0.type`` (MLflow refuses brackets in names)."""
    return _BAD_NAME_CHARS.sub("_", re.sub(r"\[(\d+)\]", r".\1", key))

