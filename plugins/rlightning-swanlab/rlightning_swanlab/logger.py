"""The SwanLab logger: each logging step becomes one point per metric at that step of a SwanLab experiment.

swanlab keeps one active run per process: creating this logger finishes a SwanLab run already active in the
process (``reinit=True``), so two ``swanlab`` loggers cannot record at the same time in one process (two
rlightning runs one after the other are fine).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlightning_core.logging.numeric import NumericMetrics
from rlightning_swanlab.params import SwanlabParams

__all__ = ["SwanlabLogger"]

log = logging.getLogger("rlightning")


class SwanlabLogger:
    """Writes metrics and the run config into a SwanLab experiment under ``RUN_DIR/swanlog``.

    Value policy: real numbers are logged as floats, NaN and infinities included; values that are not
    numbers are skipped with one warning per metric name. The step is rlightning's step (environment steps
    so far). Videos (``logging.video_every``) are not attached: SwanLab's ``Video`` takes GIF files only;
    the MP4s stay in ``RUN_DIR/videos``.

    Args:
        params: the logger's options.
        run_dir: the run directory; SwanLab writes ``RUN_DIR/swanlog/``.
    """

    def __init__(self, params: SwanlabParams, *, run_dir: str | Path) -> None:
        import swanlab

        from rlightning_core.logging.runinfo import flat_run_config

        self.params = params
        self.run_dir = Path(run_dir)
        self.log_dir = self.run_dir / "swanlog"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        settings = swanlab.Settings(
            interactive=False,
            terminal={"proxy_type": "all" if params.console else "none"},
            probe={"hardware": params.monitor, "monitor": params.monitor},
        )
        self.run: Any = swanlab.init(
            log_dir=str(self.log_dir), mode=params.mode, project=params.project, workspace=params.workspace,
            name=params.name or self.run_dir.name, description=params.description,
            tags=list(params.tags) or None, config=flat_run_config(self.run_dir) if params.log_config else None,
            settings=settings, reinit=True,
        )
        self._numeric = NumericMetrics("swanlab logger")
        self._closed = False

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Log one point per numeric metric at ``step``."""
        if self._closed:
            raise RuntimeError(f"SwanlabLogger for {self.run_dir} is closed; create a new one to log")
        row = self._numeric(metrics)
        if row:
            self.run.log(row, step=int(step))

    def close(self) -> None:
        """Finish the SwanLab experiment (writes everything out); closing twice is harmless."""
        if not self._closed:
            self._closed = True
            self.run.finish()

