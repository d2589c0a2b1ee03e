"""The W&B logger: each logging step becomes one row of the W&B run's history at that step.

wandb is imported when the logger is created. The run is created with ``reinit="create_new"`` so several
rlightning runs (or a W&B run of your own) can live in one process; the logger only touches its own run
object, never wandb's global ``wandb.run``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlightning_core.logging.numeric import NumericMetrics
from rlightning_wandb.params import WandbParams

__all__ = ["WandbLogger"]

log = logging.getLogger("rlightning")

#: Seconds ``close()`` waits for wandb's core process to finish writing the run file.
_CLOSE_TIMEOUT_S = 30.0


class WandbLogger:
    """Writes metrics, the run config and training videos into a W&B run stored under ``RUN_DIR/wandb``.

    Value policy: real numbers are logged as floats (NaN and infinities included: W&B stores them); values
    that are not numbers are skipped with one warning per metric name. The history step is the rlightning
    step (environment steps so far), so W&B charts share the x-axis of TensorBoard and ``metrics.jsonl``.

    Args:
        params: the logger's options.
        run_dir: the run directory; W&B writes ``RUN_DIR/wandb/``.
    """

    def __init__(self, params: WandbParams, *, run_dir: str | Path) -> None:
        import wandb

        from rlightning_core.logging.runinfo import flat_run_config

        self.params = params
        self.run_dir = Path(run_dir)
        self._wandb = wandb
        config = flat_run_config(self.run_dir) if params.log_config else None
        settings = wandb.Settings(silent=True, console="auto" if params.console else "off")
        try:
            self.run: Any = wandb.init(
                dir=str(self.run_dir), mode=params.mode, project=params.project, entity=params.entity,
                name=params.name or self.run_dir.name, group=params.group, tags=list(params.tags) or None,
                notes=params.notes, config=config, settings=settings, reinit="create_new",
            )
        except wandb.Error as exc:  # e.g. mode online without credentials: a user error, not a crash
            from rlightning_core.errors import UserError

            raise UserError(f"logger 'wandb' (mode: {params.mode}) could not start a W&B run: {exc} "
                            "(run `wandb login` or set WANDB_API_KEY, or use params.mode: offline)") from exc
        self.run_path = Path(self.run.dir).parent if params.mode != "disabled" else None
        """W&B's folder for this run (``RUN_DIR/wandb/offline-run-...``), ``None`` when disabled."""
        self._numeric = NumericMetrics("wandb logger")
        self._closed = False

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Add one history row at ``step`` with every numeric metric."""
        self._check_open()
        row = self._numeric(metrics)
        if row:
            self.run.log(row, step=int(step))

    def log_video(self, step: int, path: str | Path, *, tag: str = "video", fps: int = 30) -> None:
        """Attach the MP4 at ``path`` to the history row of ``step`` as a ``wandb.Video`` under ``tag``."""
        self._check_open()
        del fps  # the file carries its frame rate
        self.run.log({tag: self._wandb.Video(str(path), format="mp4")}, step=int(step))

    def close(self) -> None:
        """Finish the W&B run and wait until its run file is complete on disk; closing twice is harmless.

        wandb's core process writes the run file behind ``run.finish()``; this waits (up to
        ``_CLOSE_TIMEOUT_S``) for the file's closing record, so whoever reads the run directory after the
        training run ends (``wandb sync``, a test, a script) sees every metric.
        """
        if self._closed:
            return
        self._closed = True
        self.run.finish()
        if self.run_path is None:
            return
        from rlightning_wandb.offline import has_exit_record

        file = self.run_path / f"run-{self.run.id}.wandb"
        deadline = time.monotonic() + _CLOSE_TIMEOUT_S
        while not has_exit_record(file):
            if time.monotonic() > deadline:
                log.warning("wandb logger: %s is still incomplete %.0f s after finish()", file, _CLOSE_TIMEOUT_S)
                return
            time.sleep(0.05)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"WandbLogger for {self.run_dir} is closed; create a new one to log")

