"""The JSON-lines logger: one JSON object per logging step, flushed as it is written."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from attrs import define, field

from rlightning_core.config.validators import relative_path


@define(frozen=True, kw_only=True)
class JsonlParams:
    """Options of the ``jsonl`` logger."""

    filename: str = field(default="metrics.jsonl", validator=relative_path)
    """File name inside the run directory (a relative path; ``..`` and absolute paths are refused)."""


class JsonlLogger:
    """Appends ``{"step": ..., **metrics}`` lines to a file in the run directory."""

    def __init__(self, params: JsonlParams, *, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / params.filename
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", encoding="utf-8")

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """Write one line; non-finite floats are written as null so the file stays valid JSON."""
        row: dict[str, Any] = {"step": int(step)}
        for key, value in metrics.items():
            v = float(value) if not isinstance(value, str) else value
            row[key] = None if isinstance(v, float) and not math.isfinite(v) else v
        self._fh.write(json.dumps(row) + "\n")
        self._fh.flush()

    def close(self) -> None:
        """Close the file."""
        if not self._fh.closed:
            self._fh.close()
