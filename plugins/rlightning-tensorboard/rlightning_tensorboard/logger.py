"""The TensorBoard logger: each metric of a logging step becomes one scalar event at that step.

Events are written with torch's public :class:`torch.utils.tensorboard.SummaryWriter` (tensorboard's own
writer classes are internal or marked experimental); torch is imported when the logger is created.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlightning_tensorboard.params import TensorBoardParams

__all__ = ["TensorBoardLogger"]

log = logging.getLogger("rlightning")


class TensorBoardLogger:
    """Writes metrics as TensorBoard scalars into ``RUN_DIR/<params.subdir>``.

    Value policy:

    - every value that is a real number (``int``, ``float``, ``bool``, numpy scalars, 0-d tensors) is written
      as ``float(value)`` with the tag unchanged (``loss/policy`` shows as chart ``policy`` in section
      ``loss``);
    - non-finite values (NaN, +-inf) are written as they are: TensorBoard stores and shows them, and hiding
      a diverging loss would mislead (the JSONL log, which cannot hold NaN, writes ``null`` instead);
    - other values (strings, lists, ...) are not scalars: they are skipped, with one warning per metric name.

    Args:
        params: the logger's options.
        run_dir: the run directory; the event directory is created inside it.
    """

    def __init__(self, params: TensorBoardParams, *, run_dir: str | Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.params = params
        self.log_dir = Path(run_dir) / params.subdir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._writer: Any = SummaryWriter(log_dir=str(self.log_dir), flush_secs=params.flush_secs)
        self._skipped: set[str] = set()
        self._closed = False

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Add one scalar per numeric metric at ``step`` (environment steps so far)."""
        if self._closed:
            raise RuntimeError(f"TensorBoardLogger for {self.log_dir} is closed; create a new one to log")
        step = int(step)
        for tag, value in metrics.items():
            number = _as_float(value)
            if number is None:
                if tag not in self._skipped:
                    self._skipped.add(tag)
                    log.warning("tensorboard logger: metric %r is not a number (%s), not logged",
                                tag, type(value).__name__)
                continue
            self._writer.add_scalar(tag, number, global_step=step)

    def flush(self) -> None:
        """Write pending events to disk now."""
        if not self._closed:
            self._writer.flush()

    def close(self) -> None:
        """Flush pending events and close the event file; closing twice is harmless."""
        if not self._closed:
            self._closed = True
            self._writer.close()


def _as_float(value: Any) -> float | None:
    """``float(value)`` for real numbers (and 0-d arrays/tensors), ``None`` for anything else."""
    if isinstance(value, numbers.Real):
        return float(value)
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        item = value.item()
        if isinstance(item, numbers.Real):
            return float(item)
    return None
